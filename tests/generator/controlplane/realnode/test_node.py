"""What the real node takes from the machine's registry: the registry names it redirects, the
read-only registry it pulls from, and its own copy of that one's client certificate (which the
writable registry refuses), which no other user of the machine may read."""
from __future__ import annotations

import stat

import pytest

from generator.controlplane.layout import Layout
from generator.controlplane.realnode import config, containerd, node
from generator.errors import UserError
from generator.images.registry import Registry


def test_the_registry_names_are_those_the_registry_holds_images_under():
    held = ["docker.io/library/alpine:3.10", "docker.io/curlimages/curl:8.10.1", "ghcr.io/pytorchjob-kit/trainer:0.1.0",
            "localhost:5001/own:1", "us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset:main",
            "charts/pytorch-operator:0.1.0", "charts/pytorchjob:0.1.0"]  # the charts, which no image pull names
    assert node.registry_names(held) == ("docker.io", "ghcr.io", "localhost:5001", "us-central1-docker.pkg.dev")


def test_the_node_copies_the_read_only_registrys_client_into_its_own_folder_readable_by_root_alone(tmp_path):
    from generator.controlplane import registry

    reg = Registry(tmp_path / "registry")
    registry._files(reg)
    registry._files(reg.readonly)
    folders = config.Folders.of(Layout(tmp_path / "cluster"))
    node.copy_registry_client(reg, folders)
    node.copy_registry_client(reg, folders)  # a restart of the node writes them again
    assert stat.S_IMODE(folders.registry_client.stat().st_mode) == 0o700
    for name in containerd.REGISTRY_CLIENT_FILES:
        copy = folders.registry_client / name
        assert copy.read_bytes() == (reg.readonly.certs / name).read_bytes()
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    # Not the writable registry's key, which pushes and deletes.
    assert (folders.registry_client / "client.key").read_bytes() != (reg.certs / "client.key").read_bytes()


def test_the_node_pulls_from_the_read_only_registry(tmp_path, monkeypatch):
    """Its hosts files name the read-only registry's address and the node's copy of that one's client."""
    import json

    from tests.generator.controlplane.realnode.test_config import real_node

    tomllib = pytest.importorskip("tomllib", reason="reading TOML needs Python 3.11's tomllib")
    reg = Registry(tmp_path / "registry")
    for one, port in ((reg, 5000), (reg.readonly, 5001)):
        one.root.mkdir(parents=True, exist_ok=True)
        one.state.write_text(json.dumps({"port": port, "pid": 4242}))
    monkeypatch.setattr(Registry, "pid", lambda self: self.read_state()["pid"])  # both running
    monkeypatch.setattr(Registry, "catalog", lambda self: ["ghcr.io/kubeflow/x:1"])
    mirror = node.mirror(reg)
    assert mirror == config.Mirror("127.0.0.1:5001", ("ghcr.io",))
    built = real_node(tmp_path / "c", mirror)
    (hosts,) = containerd.registry_hosts(built).values()
    client = built.folders.registry_client
    assert tomllib.loads(hosts)["host"] == {"https://127.0.0.1:5001/v2/ghcr.io": {
        "capabilities": ["pull", "resolve"], "ca": str(client / "ca.crt"),
        "client": [[str(client / "client.cert"), str(client / "client.key")]], "override_path": True}}


def test_a_registry_that_is_not_running_is_named_with_how_to_start_it(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=r"the registry in .* is not running.*`python -m generator image registry up`"):
        node.mirror(Registry(tmp_path / "registry"))
    # The writable one alone (started before the read-only twin existed) is not enough: the node pulls from the twin.
    monkeypatch.setattr(Registry, "pid", lambda self: 4242 if self.writable else None)
    reg = Registry(tmp_path / "registry")
    reg.root.mkdir(parents=True)
    reg.state.write_text('{"port": 5000}')
    with pytest.raises(UserError, match=r"the registry in .* is not running"):
        node.mirror(reg)


def test_ready_and_available_read_only_a_true_condition_of_that_type():
    """The Node's Ready (and a pod's, a Deployment's Available) as the API server writes it: the
    condition of that type with status "True"; Unknown (a lost kubelet), False or none is not."""
    from kubernetes.client import V1Node, V1NodeCondition, V1NodeStatus

    from generator.controlplane import admin

    def node(*conditions: tuple[str, str]) -> V1Node:
        return V1Node(status=V1NodeStatus(conditions=[V1NodeCondition(type=t, status=s) for t, s in conditions]))

    assert admin.holds(node(("MemoryPressure", "False"), ("Ready", "True")), "Ready")
    assert not admin.holds(node(("Ready", "Unknown")), "Ready")
    assert not admin.holds(node(("Ready", "False"), ("DiskPressure", "True")), "Ready")
    assert not admin.holds(V1Node(status=V1NodeStatus()), "Ready")
