"""`cluster up` refuses a bad node description before it builds or starts anything."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from generator.controlplane.layout import MARKER
from tests.support.cli_helpers import run
from tests.support.waiting import wait_for


@pytest.mark.parametrize(("args", "message"), [
    (["--cpu", "lots"], "Invalid value for '--cpu': 'lots' is not a positive quantity; write a Kubernetes quantity"),
    (["--memory", "16GB"], "Invalid value for '--memory': '16GB' is not a positive quantity; write 16Gi"),
    (["--cpu", "0"], "'0' is not a positive quantity"),
    (["--gpus", "-1"], "Invalid value for '--gpus': -1 is not in the range x>=0."),
    (["--image", "my/trainer"], "Invalid value for '--image': 'my/trainer': write REPO=host (your own code, run by this "
                                "machine's python), REPO=DIR[:PATH] (the folder DIR is what the image holds at PATH, "
                                "default its workingDir, else /workspace), or REPO=KNOWN, where KNOWN is one of "
                                "ghcr.io/pytorchjob-kit/trainer"),
    (["--image", "my/trainer=my/other"], "'my/trainer=my/other': my/other is not a folder here, nor a known image; "
                                         "write REPO=host"),
    (["--image", "docker.io/my/trainer:1.0=host"], "REPO is an image's repository, with a tag or without, never a "
                                                  "digest, and Docker Hub's names short: write my/trainer:1.0=host"),
    (["--no-operator", "--image", "my/trainer=host"],
     "--image my/trainer=host runs your code with this machine's python, which only `generator run` does; the node "
     "runs images: give your code's folder instead, `--image my/trainer=DIR[:PATH]`"),
    (["--nodes", "9"], "Invalid value for '--nodes': 9 is not in the range 1<=x<=8."),
    (["--node-grace-period", "5"], "Invalid value for '--node-grace-period': 5 is not in the range x>=10."),
    (["--node", "process"], "Invalid value for '--node': 'process': the local cluster has one kind of node, the real "
                            "one (kubelet, containerd, runc and kube-proxy, as on your cluster); it needs root"),
])
def test_a_bad_node_option_is_refused_with_the_fix(args, message, tmp_path):
    code, out, err = run("cluster", "up", "--dir", str(tmp_path / "cluster"), *args)
    assert code == 2 and out == ""
    assert message in " ".join(err.split()), err
    assert not (tmp_path / "cluster").exists()  # nothing was started or written


@pytest.mark.parametrize("flag", ["--cpu", "--memory"])
def test_a_node_larger_than_this_machine_is_refused_naming_the_most_and_kueues_quota(flag, tmp_path):
    from generator.controlplane.realnode import support

    machine = support.Capacity.read()
    value = str(machine.cpus + 1) if flag == "--cpu" else f"{machine.memory // 2**20}Mi"
    code, out, err = run("cluster", "up", "--dir", str(tmp_path / "cluster"), flag, value)
    said = " ".join(err.split())
    assert code == 1 and out == "" and "Traceback" not in err
    assert f"{flag} {value}: the node's allocatable can be at most what this machine has" in said
    assert "`--kueue --kueue-quota cpu=...,memory=...`" in said
    assert not (tmp_path / "cluster").exists()


def test_a_node_in_a_folder_too_deep_for_its_sockets_is_refused_before_anything_starts(tmp_path):
    deep = tmp_path / ("d" * 90) / "cluster"
    code, out, err = run("cluster", "up", "--no-operator", "--dir", str(deep))
    assert code == 1 and out == "" and "Traceback" not in err
    assert (f"the local cluster's node (kubelet, containerd, runc) cannot run here: the node's socket "
            f"{deep}/node/containerd/containerd.sock.ttrpc is") in err
    assert "give `cluster up --dir` a shorter folder" in err
    assert not deep.exists()


@pytest.mark.parametrize("args", [["kill", "box-node2"], ["start", "box-node2"], ["list"]])
def test_the_node_commands_without_a_running_cluster_say_how_to_start_one(args, tmp_path):
    code, out, err = run("cluster", "node", *args, "--dir", str(tmp_path / "cluster"))
    assert code == 1 and out == "" and "Traceback" not in err
    assert (f"no cluster runs in {tmp_path / 'cluster'}; start one with `python -m generator cluster up --nodes 3 "
            f"--dir {tmp_path / 'cluster'}`") in " ".join(err.split()), err


def test_operator_values_without_the_operator_is_a_usage_error(tmp_path):
    values = tmp_path / "operator.yaml"
    values.write_text("kubeApiQPS: 40\n")
    code, _, err = run("cluster", "up", "--dir", str(tmp_path / "cluster"), "--no-operator", "-f", str(values))
    assert code == 2 and "-f gives values for the operator release, which --no-operator leaves out" in err
    assert not (tmp_path / "cluster").exists()


def test_an_unreadable_state_file_is_named_with_the_fix_and_down_clears_it(tmp_path):
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "state.json").write_text('{"phase": "ready", "pid": ')  # a disk that filled mid-write, say
    code, out, err = run("cluster", "status", "--dir", str(folder))
    assert code == 1 and out == "" and "Traceback" not in err
    assert f"{folder / 'state.json'}: not a cluster state" in err
    assert f"run `python -m generator cluster down --dir {folder}`" in err
    code, out, err = run("cluster", "down", "--dir", str(folder))
    assert code == 0 and f"{folder / 'state.json'} (unreadable, removed)" in out, err
    code, out, _ = run("cluster", "status", "--dir", str(folder))
    assert code == 0 and out.startswith(f"cluster in {folder}: absent")


def _state(folder, supervisor: int, children: dict[str, int]) -> None:
    from generator.controlplane import state

    folder.mkdir(exist_ok=True)
    state.save(folder / "state.json", state.ClusterState(
        phase="ready", pid=supervisor, processes={n: state.Process(p, str(folder / f"{n}.log")) for n, p in children.items()}))


def test_up_on_a_running_cluster_keeps_its_node_and_refuses_other_node_options(tmp_path):
    from generator.controlplane import state

    folder = tmp_path / "cluster"
    folder.mkdir()
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                                  env={**os.environ, MARKER: str(folder)}, stdout=subprocess.PIPE, text=True)
    try:
        assert supervisor.stdout.readline() == "up\n"
        state.save(folder / "state.json", state.ClusterState(
            phase="ready", pid=supervisor.pid, kubeconfig=str(folder / "kubeconfig"),
            node_options=state.NodeOptions(gpus=2), processes={"containerd": state.Process(2**22 + 1, ""),
                                                              "kubelet": state.Process(2**22 + 2, "")}))
        code, out, err = run("cluster", "up", "--gpus", "2", "--dir", str(folder))
        assert code == 0 and out == f"export KUBECONFIG={folder / 'kubeconfig'}\n", err
        code, out, err = run("cluster", "up", "--cpu", "1", "--dir", str(folder))
        assert code == 1 and out == "" and "Traceback" not in err
        assert (f"the cluster in {folder} runs already, and its node was started otherwise: --cpu 1 (it runs with "
                f"unset); --gpus 0 (it runs with 2); run `python -m generator cluster down --dir {folder}`, then "
                "`cluster up` with the node's options") in " ".join(err.split())
        code, out, err = run("cluster", "up", "--gpus", "2", "--nodes", "3", "--dir", str(folder))
        assert code == 1 and "--nodes 3 (it runs with 1)" in " ".join(err.split()), err
    finally:
        supervisor.kill()
        supervisor.wait()


def test_down_never_signals_a_process_that_is_not_the_clusters_own(tmp_path):
    """After a reboot or PID reuse, state.json's numbers belong to somebody else's processes."""
    import subprocess
    import sys

    folder = tmp_path / "cluster"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # no marker: not the cluster's
    try:
        _state(folder, bystander.pid, {"etcd": bystander.pid})
        code, out, _ = run("cluster", "status", "--dir", str(folder))
        assert code == 0 and out.startswith(f"cluster in {folder}: stopped")
        code, out, err = run("cluster", "down", "--dir", str(folder))
        assert code == 0, err
        assert (f"warning: pid {bystander.pid}, which {folder / 'state.json'} names as the supervisor, is another "
                "process now (after a reboot or a reused process id): left alone") in err
        assert "etcd" not in out and str(bystander.pid) not in out
        assert bystander.poll() is None  # still running
    finally:
        bystander.kill()
        bystander.wait()


def test_down_kills_a_child_that_leads_no_group_and_reports_only_what_it_did(tmp_path):
    import os
    import subprocess
    import sys

    from generator.controlplane.layout import MARKER

    folder = tmp_path / "cluster"
    folder.mkdir()
    env = {**os.environ, MARKER: str(folder)}
    # Not a group leader: killpg(pid) would miss it (or hit another group of that number).
    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], env=env,
                             stdout=subprocess.PIPE, text=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"], env=env)
    gone.wait()
    try:
        assert child.stdout.readline() == "up\n"  # exec'd: its environment is the marked one
        assert os.getpgid(child.pid) != child.pid
        _state(folder, gone.pid, {"kube-scheduler": child.pid, "etcd": gone.pid})
        code, out, err = run("cluster", "down", "--dir", str(folder))
        assert code == 0, err
        assert child.wait(timeout=10) == -9
        assert out.strip() == f"stopped: kube-scheduler (pid {child.pid}, killed)"  # the exited ones are not claimed
    finally:
        child.kill()
        child.wait()


FREEZER = Path("/sys/fs/cgroup/freezer")  # cgroup v1's: a frozen process killed stays until thawed


@contextlib.contextmanager
def frozen(pid: int):
    """The process held frozen: a SIGKILL reaches it, and it exits only once thawed. That is the
    moment between a kill and the exit, which load makes long enough to be seen, held open. It is
    killed on the way out (the test's own process), so that its cgroup can go."""
    folder = FREEZER / f"pytorchjob-kit-test-{pid}"
    folder.mkdir()
    try:
        (folder / "cgroup.procs").write_text(str(pid))
        (folder / "freezer.state").write_text("FROZEN")
        wait_for(lambda: (folder / "freezer.state").read_text().strip() == "FROZEN", 10, f"pid {pid} frozen",
                 interval=0.01)
        yield
    finally:
        (folder / "freezer.state").write_text("THAWED")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not (folder / "cgroup.procs").read_text().strip(), 10, f"pid {pid} gone from {folder}",
                 interval=0.01)
        folder.rmdir()


def killed_not_exited(pid: int) -> bool:
    """A SIGKILL waits on the process, which has not exited yet."""
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return status["State"][0] != "Z" and bool(int(status["ShdPnd"], 16) & 1 << (signal.SIGKILL - 1))


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(FREEZER, os.W_OK), reason="needs root and cgroup v1's freezer")
def test_down_tells_once_of_a_process_it_killed_that_has_not_exited_yet(tmp_path):
    """A recorded child killed by name is still in /proc, with its marker, until it has exited; the
    sweep for leftovers that follows must not kill and report it a second time."""
    from generator.controlplane.layout import MARKER

    folder = tmp_path / "cluster"
    folder.mkdir()
    env = {**os.environ, MARKER: str(folder)}
    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], env=env,
                             stdout=subprocess.PIPE, text=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"], env=env)
    gone.wait()
    try:
        assert child.stdout.readline() == "up\n"
        _state(folder, gone.pid, {"kube-scheduler": child.pid})
        with frozen(child.pid):
            code, out, err = run("cluster", "down", "--dir", str(folder))
            assert killed_not_exited(child.pid)  # as under load, a moment longer
        assert code == 0, err
        assert out.strip() == f"stopped: kube-scheduler (pid {child.pid}, killed)"
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_down_under_load_tells_once_of_each_process_it_killed(tmp_path):
    """Where no freezer holds the moment open (no root, no cgroup v1), load does: a killed child
    that runs only when nothing else wants its CPU (SCHED_IDLE, beside a hog on the same one) is
    often still in /proc when the sweep for leftovers reads it (1 run in 3 before the fix)."""
    from generator.controlplane.layout import MARKER

    cpu = min(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    idle = (f"import os, time; os.sched_setaffinity(0, {{{cpu}}}); "
            "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)); print('up', flush=True); time.sleep(60)")
    told = []
    try:
        for round_ in range(30):
            folder = tmp_path / f"cluster-{round_}"
            child = subprocess.Popen([sys.executable, "-c", idle], env={**os.environ, MARKER: str(folder)},
                                     stdout=subprocess.PIPE, text=True)
            try:
                assert child.stdout.readline() == "up\n"
                _state(folder, child.pid + 10 ** 7, {"kube-scheduler": child.pid})  # a supervisor long gone
                code, out, err = run("cluster", "down", "--dir", str(folder))
                assert code == 0, err
                told.append(out.strip().replace(str(child.pid), "N"))
            finally:
                child.kill()
                child.wait()
    finally:
        hog.kill()
        hog.wait()
    assert told == ["stopped: kube-scheduler (pid N, killed)"] * 30


def test_down_purge_removes_the_keys_and_data_and_nothing_else(tmp_path):
    from generator.controlplane.layout import MARK_FILE, Layout

    folder = tmp_path / "cluster"
    Layout(folder).create()
    for name in ("pki/ca.key", "pki/ca.crt", "etcd/member/snap", "kubeconfigs/admin", "kubelet/pods/x/token",
                 "volumes/pvc-1/model.pt", "logs/etcd.log", "node3/kubelet/pods/y/token", "requests/1.done"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("secret")
    (folder / "kubeconfig").write_text("admin")
    (folder / "notes.txt").write_text("mine")  # not the cluster's: stays
    code, out, err = run("cluster", "down", "--purge", "--dir", str(folder))
    assert code == 0, err
    assert out.splitlines()[0] == "nothing was running"
    removed = out.splitlines()[1].removeprefix("removed: ").split(", ")
    assert sorted(removed) == sorted(str(folder / n) for n in ("pki", "etcd", "kubeconfigs", "kubeconfig", "kubelet",
                                                                 "volumes", "logs", "node3", "requests"))
    assert sorted(p.name for p in folder.iterdir()) == [MARK_FILE, "notes.txt"]  # still a cluster's folder


@pytest.mark.parametrize("marked", ["no marker", "marker is a link"])
def test_down_purge_of_a_folder_that_is_no_clusters_is_refused_with_nothing_removed(tmp_path, marked):
    """`--purge --dir /var/lib` would have deleted a real node's etcd, kubelet, volumes and logs."""
    from generator.controlplane.layout import MARK_FILE

    folder = tmp_path / "lib"
    names = ("etcd/member/snap", "kubelet/config.yaml", "volumes/data", "logs/app.log", "pki/ca.key")
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("real data")
    if marked == "marker is a link":
        (tmp_path / "elsewhere").write_text("")
        (folder / MARK_FILE).symlink_to(tmp_path / "elsewhere")
    code, out, err = run("cluster", "down", "--purge", "--dir", str(folder))
    assert code == 1 and out == ""
    assert err.strip() == (f"error: {folder} is not a cluster's folder (it has no {MARK_FILE}, which `cluster up` writes): "
                           "nothing was removed; check --dir")
    assert all((folder / name).read_text() == "real data" for name in names)


def test_down_purge_is_refused_while_a_process_of_the_cluster_runs(tmp_path):
    import os
    import subprocess
    import sys

    from generator.controlplane import teardown
    from generator.controlplane.layout import MARKER, Layout

    folder = tmp_path / "cluster"
    Layout(folder).create()
    (folder / "pki").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            env={**os.environ, MARKER: str(folder)}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"  # exec'd: its environment is the marked one
        with pytest.raises(teardown.UserError) as refused:
            teardown.purge(Layout(folder))
        assert "still has processes running" in str(refused.value) and (folder / "pki").is_dir()
    finally:
        proc.kill()
        proc.wait()


def test_up_says_when_it_reuses_an_earlier_clusters_ca(tmp_path):
    from generator.controlplane import lifecycle, pki
    from generator.controlplane.layout import Layout

    layout = Layout(tmp_path / "cluster")
    assert lifecycle._old_ca(layout) == ""  # noqa: SLF001 - a first start says nothing
    pki.Authority(layout.pki)
    said = lifecycle._old_ca(layout)  # noqa: SLF001
    assert said.startswith("reusing the cluster's CA of 20") and f"and the keys in {layout.pki}" in said
    assert f"`python -m generator cluster down --purge --dir {layout.root}` removes them" in said


def test_down_kills_a_pods_process_that_left_its_session_and_dropped_the_marker(tmp_path):
    import os
    import subprocess

    from generator.controlplane.realnode import cgroups, host

    folder = tmp_path / "cluster"
    (folder / "node").mkdir(parents=True)  # a node was started here; its supervisor is gone
    v2 = next((h for h in host.hierarchies() if (h / "cgroup.procs").exists() and os.access(h, os.W_OK)
               and (h / "cgroup.controllers").exists()), None)
    if os.geteuid() != 0 or v2 is None:
        pytest.skip("needs root and a writable cgroup v2")
    # As the kubelet puts a container: under the cluster's cgroupRoot; then it leaves its session, with a clean env.
    container = v2 / cgroups.cluster_name(folder) / "kubepods" / "pod-uid" / "app"
    container.mkdir(parents=True)
    escaped = subprocess.Popen(["setsid", "env", "-i", "sleep", "60"],
                               preexec_fn=lambda: (container / "cgroup.procs").write_text(str(os.getpid())))
    try:
        _state(folder, None, {})
        code, out, err = run("cluster", "down", "--dir", str(folder))
        assert code == 0, err
        assert escaped.wait(timeout=10) == -9
        assert "1 container processes (killed)" in out
        assert not any(f.exists() for f in host.cgroup_folders(folder))
    finally:
        escaped.kill()
        escaped.wait()
        cgroups.remove_tree(v2 / cgroups.cluster_name(folder))


@pytest.mark.parametrize(("args", "message"), [
    (["--kueue", "--kueue-quota", "cpu"], "Invalid value for '--kueue-quota': 'cpu': write RESOURCE=QUANTITY"),
    (["--kueue", "--kueue-quota", "gpu=1"], "RESOURCE one of cpu, memory, nvidia.com/gpu"),
    (["--kueue-quota", "cpu=2"], "--kueue-quota sizes Kueue's ClusterQueue: add --kueue"),
])
def test_a_bad_kueue_quota_is_refused_before_anything_starts(args, message, tmp_path):
    code, out, err = run("cluster", "up", "--dir", str(tmp_path / "cluster"), *args)
    assert code == 2 and out == "" and message in " ".join(err.split()), err
    assert not (tmp_path / "cluster").exists()


def test_build_builds_the_control_plane_and_the_node(tmp_path, monkeypatch):
    from generator.controlplane import build
    from generator.controlplane.realnode import support

    if support.installs_packages(support.Machine.read()) or support.why_not(support.Machine.read()):
        pytest.skip("the node's first build here installs runc, iptables and the CNI plugins, which a test must not "
                    "do, or the node cannot run here")
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))
    for group in build.table().values():  # as built: Go is not needed
        build.group_dir(group.name).mkdir(parents=True)
        for name in group.files:
            (build.group_dir(group.name) / name).write_text("")
        (build.group_dir(group.name) / build.COMPLETE).write_text(group.stamp)
    code, out, err = run("cluster", "build")
    assert code == 0, err
    assert "up to date: etcd in" in out and "up to date: kubelet in" in out
    code, out, err = run("cluster", "build", "--node", "process")
    assert code == 2 and out == "" and "the local cluster has one kind of node" in " ".join(err.split())


def test_up_names_the_releases_it_installs_as_it_installs_them():
    """The help is written by hand; the release names and namespaces are the installers' (a renamed
    release would leave `helm list` and the help disagreeing)."""
    from generator.cli.cluster import up
    from generator.controlplane.releases import kueue as kueue_release
    from generator.controlplane.releases import operator
    from generator.controlplane.releases import trainer as trainer_release

    said = " ".join(p.help or "" for p in up.params)  # as written: `--help` wraps lines at hyphens
    assert f"as the Helm release {operator.NAME};" in said
    assert f"release {trainer_release.NAME} in {trainer_release.NAMESPACE}" in said
    assert f"release {kueue_release.NAME} in {kueue_release.NAMESPACE}" in said
    assert f"the LocalQueue `{kueue_release.LOCAL_QUEUE}` in namespace {kueue_release.QUEUE_NAMESPACE}" in said


def test_purge_passes_over_a_file_that_went_while_it_removed_the_tree_and_no_other_error():
    from generator.controlplane import teardown

    gone = FileNotFoundError(2, "No such file or directory", "Pragma.pm")
    teardown._gone_already(os.unlink, "Pragma.pm", (FileNotFoundError, gone, None))
    denied = PermissionError(13, "Permission denied", "ca.key")
    with pytest.raises(PermissionError):
        teardown._gone_already(os.unlink, "ca.key", (PermissionError, denied, None))
