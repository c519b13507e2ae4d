"""The cluster's state file and the node options: one type each, written whole, read back the
same, and refused by name (with the fix) when this version cannot read them."""
from __future__ import annotations

import json

import pytest

from generator.controlplane import state
from generator.controlplane.network import PodNetwork
from generator.controlplane.state import ClusterState, InstalledRelease, NodeOptions, Process


def full_state() -> ClusterState:
    return ClusterState(phase="ready", pid=42, step="operator release", server="https://10.244.7.1:6443",
                        kubeconfig="/c/kubeconfig", node="box",
                        node_options=NodeOptions(gpus=1, images={"registry.example.com/ml/toy": "/srv/toy"}),
                        operator=InstalledRelease("kubeflow", "training-operator", "training-operator"),
                        pod_network=PodNetwork("pjk0000", "10.244.7.0/24"),
                        processes={"etcd": Process(43, "/c/logs/etcd.log")})


def test_a_state_reads_back_as_it_was_written(tmp_path):
    path = tmp_path / "state.json"
    state.save(path, full_state())
    assert state.load(path) == full_state()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left beside it
    # The keys scripts and tests read stay where they were.
    raw = json.loads(path.read_text())
    assert raw["operator"]["namespace"] == "kubeflow" and raw["pod_network"] == {"bridge": "pjk0000", "cidr": "10.244.7.0/24"}
    assert raw["node_options"]["images"] == {"registry.example.com/ml/toy": "/srv/toy"}


def test_no_state_file_is_no_cluster(tmp_path):
    assert state.load(tmp_path / "state.json") is None


@pytest.mark.parametrize("content", ["{\"phase\": \"ready\", \"pid\":", "[1, 2]", ""])
def test_a_corrupt_state_file_is_named_with_the_fix(tmp_path, content):
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(state.StateError) as error:
        state.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: not a cluster state")
    assert f"run `python -m generator cluster down --dir {tmp_path}`" in message


def test_a_state_from_an_older_version_is_refused_by_name(tmp_path):
    path = tmp_path / "state.json"
    # What the untyped supervisor wrote: no version.
    path.write_text(json.dumps({"phase": "ready", "pid": 42, "processes": {}, "error": None}))
    with pytest.raises(state.StateError, match=f"{path}: written by another pytorchjob-kit version "
                                               rf"\(state version 1, this one reads {state.VERSION}\)"):
        state.load(path)


def test_a_state_written_before_the_node_options_were_kept_is_refused_with_the_way_out(tmp_path):
    """Version 4 had no node options: read as a node without images, `cluster up --image` would pass
    a mapping the running node lacks, so the file is refused and `cluster down` named instead."""
    path = tmp_path / "state.json"
    raw = json.loads(full_state().to_json())
    del raw["node_options"]
    path.write_text(json.dumps({**raw, "version": 4}))
    with pytest.raises(state.StateError) as refused:
        state.load(path)
    assert str(refused.value) == (f"{path}: written by another pytorchjob-kit version (state version 4, this one "
                                  f"reads 7); run `python -m generator cluster down --dir {tmp_path}`, which stops "
                                  "what that cluster left running without it and removes the file")


def test_a_state_with_fields_this_version_does_not_know_is_refused(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": state.VERSION, "phase": "ready", "workers": ["a"]}))
    with pytest.raises(state.StateError, match="unknown fields workers"):
        state.load(path)


def test_node_options_round_trip_through_their_encoding():
    options = NodeOptions(cpu="4", memory="8Gi", gpus=2, images={"my/trainer": "ghcr.io/pytorchjob-kit/trainer"},
                          count=3, grace=10)
    assert NodeOptions.decode(options.encode()) == options
    assert NodeOptions.decode(NodeOptions().encode()) == NodeOptions()


@pytest.mark.parametrize("text", ["cpu=4", '{"cpus": 4}', '{"gpus": "two"}', '{"count": "3"}', '{"grace": 1.5}'])
def test_node_options_that_do_not_decode_say_so(text):
    with pytest.raises(ValueError, match="--node"):
        NodeOptions.decode(text)


def test_a_state_that_cannot_be_written_leaves_the_last_one_and_no_temp_file(tmp_path):
    """A full disk while a cluster starts: the state written before stays whole, nothing beside it."""
    from tests.support.full_disk import full_folder, left

    def first(folder):
        state.save(folder / "state.json", ClusterState(pid=1, phase="starting"))

    with full_folder(tmp_path, first) as full:
        with pytest.raises(OSError):
            state.save(full / "state.json", ClusterState(pid=1, phase="ready", error="x" * 8192))
        assert left(full) == ["state.json"]
        assert state.load(full / "state.json").phase == "starting"
