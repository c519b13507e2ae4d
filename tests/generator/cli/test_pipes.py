"""Every command piped into a reader that quits early (`| head -1`, `| grep -m1`, quitting `less`)
ends as Unix tools do: quietly, with status 141 (or 0 when it had written everything before the
reader left; diagnose 1 for its findings), no error and no traceback; the streaming ones (`logs --follow`, `run`) stop their
work at once instead of running on for nobody.

Two readers: one that takes the first line and closes, as `head -1` does, and one already gone
before anything arrives. Whether a one-shot command writes again after the first reader has
closed depends on timing; into the second, its first write always meets the closed pipe."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.support import MANIFESTS, ROOT
from tests.support.cli_helpers import run
from tests.support.pipes import OUTPUT_CLOSED, into_a_closed_pipe, quiet, read_one_line_then_close
from tests.support.waiting import wait_for

SCENARIOS = ROOT / "tests" / "scenarios" / "pytorchjob"
RECORDED = ROOT / "tests" / "generator" / "diagnose" / "recorded" / "insufficient-gpus.yaml"
NS = "ml"
@pytest.fixture
def job(api, tmp_path):
    """A finished job with two pods and their logs in the API double, for the cluster commands."""
    values = tmp_path / "mnist.yaml"
    values.write_text("job: {name: mnist}\ntopology: {workers: 1}\n")
    assert run("submit", str(values))[0] == 0
    for role, index in (("Master", 0), ("Worker", 0)):
        pod = api.add_pod(NS, "mnist", role, index, phase="Succeeded", exit_code=0)
        api.log(NS, pod, *(f"{role.lower()} line {i}" for i in range(3)))
    api.set_condition(NS, "mnist", "Succeeded", replicas={"Master": {"succeeded": 1}, "Worker": {"succeeded": 1}})
    return str(values)


def demo_values(folder: Path) -> str:
    path = folder / "demo-values.yaml"
    path.write_text("job: {name: demo}\ntopology: {workers: 2}\n")
    return str(path)


# (id, argv, the first line it prints); "{dir}" is the test's folder, "{values}" values of its own.
OFFLINE = [
    ("help", ["--help"], "Usage: python -m generator [OPTIONS] COMMAND [ARGS]...\n"),
    ("version", ["--version"], None),
    ("command-help", ["render", "--help"], "Usage: python -m generator render [OPTIONS] VALUES\n"),
    ("values", ["values", "--name", "demo", "--workers", "2"], "job:\n"),
    ("validate", ["validate", str(SCENARIOS / "cpu-default.yaml"), str(SCENARIOS / "gpu-nccl.yaml")],
     f"{SCENARIOS / 'cpu-default.yaml'}: valid\n"),
    ("validate-json", ["validate", "--format", "json", str(SCENARIOS / "cpu-default.yaml")], "[\n"),
    ("import", ["import", str(MANIFESTS / "tencent-nccl.yaml")], None),
    ("render", ["render", str(SCENARIOS / "cpu-default.yaml")], "---\n"),
    ("run-dry-run", ["run", "{values}", "--dry-run", "--run-dir", "{dir}/runs"], "job demo: 3 replica(s), outputs under {dir}/runs\n"),
    ("diagnose", ["diagnose", "bert", "--from", str(RECORDED)], "PyTorchJob bert (namespace default): Created, 2 pod(s)\n"),
    ("diagnose-json", ["diagnose", "bert", "--from", str(RECORDED), "--format", "json"], "[\n"),
    ("cluster-status", ["cluster", "status", "--dir", "{dir}/cluster"], "cluster in {dir}/cluster: absent\n"),
    ("cluster-status-json", ["cluster", "status", "--dir", "{dir}/cluster", "--format", "json"], "{\n"),
    ("cluster-down", ["cluster", "down", "--dir", "{dir}/cluster"], "nothing was running\n"),
    ("cluster-build", ["cluster", "build"], "up to date: etcd in {dir}/cache/controlplane/{etcd}\n"),
]
ON_A_CLUSTER = [
    ("submit", ["submit", "{values}"], "pytorchjob other created\n"),
    ("status", ["status", "mnist"], "PyTorchJob mnist (namespace ml): Succeeded\n"),
    ("status-json", ["status", "mnist", "--format", "json"], "{\n"),
    ("logs", ["logs", "mnist"], "master-0 | master line 0\n"),
    ("logs-follow-finished", ["logs", "mnist", "--follow"], None),
    ("wait", ["wait", "mnist"], "pytorchjob mnist succeeded\n"),
    ("delete", ["delete", "mnist"], "pytorchjob mnist deleted\n"),
]


def filled(argv: list[str], first: str | None, folder: Path, values: str):
    from generator.controlplane import build

    fill = lambda text: (text.replace("{dir}", str(folder)).replace("{values}", values)  # noqa: E731
                         .replace("{etcd}", build.group_dir("etcd").name))
    return [fill(a) for a in argv], fill(first) if first else None


def check_both_readers(argv: list[str], first: str | None, folder: Path, reset=lambda: None) -> None:
    code, line, err = read_one_line_then_close(argv, folder)
    usual = 1 if argv[0] == "diagnose" else 0  # diagnose's 1 says it found something
    assert code in (usual, OUTPUT_CLOSED) and quiet(err), f"{argv}: exit {code}\n{err}"
    assert line and (first is None or line == first), line
    reset()
    code, err = into_a_closed_pipe(argv, folder)
    assert code == OUTPUT_CLOSED and quiet(err), f"{argv}: exit {code}\n{err}"


def built_cache(folder: Path, monkeypatch) -> None:
    """A cache whose binaries look built (`cluster build` then only says so): Go is not needed."""
    from generator.controlplane import build

    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(folder))
    for group in build.table().values():
        bins = build.group_dir(group.name)
        bins.mkdir(parents=True)
        for name in group.files:
            (bins / name).write_text("")
        (bins / build.COMPLETE).write_text(group.stamp)


@pytest.mark.parametrize("argv,first", [pytest.param(a, f, id=i) for i, a, f in OFFLINE])
def test_a_command_piped_into_a_reader_that_quits_ends_quietly(tmp_path, monkeypatch, argv, first):
    if argv[:2] == ["cluster", "build"]:
        from generator.controlplane.realnode import support

        machine = support.Machine.read()
        if support.why_not(machine) or support.installs_packages(machine):
            pytest.skip("`cluster build` would install runc, iptables and the CNI plugins here, or the node cannot run")
    argv, first = filled(argv, first, tmp_path, demo_values(tmp_path))
    built_cache(tmp_path / "cache", monkeypatch)
    check_both_readers(argv, first, tmp_path)


@pytest.mark.parametrize("argv,first", [pytest.param(a, f, id=i) for i, a, f in ON_A_CLUSTER])
def test_a_cluster_command_piped_into_a_reader_that_quits_ends_quietly(api, job, tmp_path, argv, first):
    other = tmp_path / "other.yaml"  # submit's own job: mnist has finished, and a finished job is refused
    other.write_text("job: {name: other}\n")
    argv, first = filled(argv, first, tmp_path, str(other))

    def resubmit():  # delete took the job away: the second reader needs it back
        if argv[0] == "delete":
            assert run("submit", job)[0] == 0

    check_both_readers(argv, first, tmp_path, resubmit)


def test_logs_follow_of_a_running_job_stops_once_the_reader_quits(api, tmp_path):
    values = tmp_path / "mnist.yaml"
    values.write_text("job: {name: mnist}\n")
    assert run("submit", str(values))[0] == 0
    api.set_condition(NS, "mnist", "Running")
    pod = api.add_pod(NS, "mnist", "Master", 0)
    api.log(NS, pod, "epoch 1")
    talking = threading.Event()

    def trainer():  # the job keeps running and logging, as long as the test lasts
        while not talking.wait(0.2):
            api.log(NS, pod, "another step")

    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    try:
        # Bounded from the reader's quitting alone (a follow that never stopped would wait out the 60 s),
        # never from the start, which a busy machine may take long over.
        code, line, err = read_one_line_then_close(["logs", "mnist", "--follow"], tmp_path, timeout=60)
    finally:
        talking.set()
    assert line == "master-0 | epoch 1\n"
    assert code == OUTPUT_CLOSED and quiet(err), err


def replicas_of(run_dir: Path) -> list[int]:
    """This run's replica processes still alive: their env names the run's folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(run_dir).encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.trains
def test_run_stops_its_replicas_once_the_reader_quits(tmp_path):
    """`generator run | head -1`: the line arrives, then the replicas are stopped (SIGTERM, as
    Ctrl-C does) instead of training 200 epochs for nobody, and the run ends quietly."""
    values = tmp_path / "long.yaml"
    values.write_text("job: {name: long}\ntopology: {workers: 0}\nargs: [--dataset=digits, --epochs=200, --threads=1]\n")
    run_dir = tmp_path / "runs"
    try:
        code, line, err = read_one_line_then_close(["run", str(values), "--run-dir", str(run_dir)], tmp_path,
                                                   timeout=120)
        assert line.startswith("master-0 | training on digits: 1437 samples, world size 1"), line
        assert code == OUTPUT_CLOSED and quiet(err), err
        assert "job succeeded" not in err and "job failed" not in err  # no summary either: nothing to say
        wait_for(lambda: replicas_of(run_dir) == [], 5, "the run's replicas to end", interval=0.1)
    finally:
        for pid in replicas_of(run_dir):  # only if the run left them behind: ours, by their env
            os.kill(pid, 9)


def test_a_broken_pipe_that_is_not_our_output_is_a_fault_reported_as_such(monkeypatch):
    """Only a closed stdout or stderr ends quietly: a pipe to anything else (a helper process, a
    socket) breaking is a fault, told as one, not hidden behind status 141."""
    from generator.job import values_io

    def broken(*_args, **_kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(values_io, "dump", broken)
    code, out, err = run("values", "--name", "demo")
    assert code == 1 and out == ""
    assert "error: internal error (BrokenPipeError: [Errno 32] Broken pipe); rerun with --debug and report it" in err
