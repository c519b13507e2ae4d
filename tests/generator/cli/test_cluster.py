"""`cluster up` refuses a bad node description before it builds or starts anything."""
from __future__ import annotations

import pytest

from tests.support.cli_helpers import run


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
    (["--image", "my/trainer:1.0=host"], "REPO is an image's repository, without tag or digest: write my/trainer=host"),
])
def test_a_bad_node_option_is_refused_with_the_fix(args, message, tmp_path):
    code, out, err = run("cluster", "up", "--dir", str(tmp_path / "cluster"), *args)
    assert code == 2 and out == ""
    assert message in " ".join(err.split()), err
    assert not (tmp_path / "cluster").exists()  # nothing was started or written


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


def test_down_purge_removes_the_keys_and_data_and_nothing_else(tmp_path):
    folder = tmp_path / "cluster"
    for name in ("pki/ca.key", "pki/ca.crt", "etcd/member/snap", "kubeconfigs/admin", "kubelet/pods/x/token",
                 "volumes/pvc-1/model.pt", "logs/etcd.log"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("secret")
    (folder / "kubeconfig").write_text("admin")
    (folder / "notes.txt").write_text("mine")  # not the cluster's: stays
    code, out, err = run("cluster", "down", "--purge", "--dir", str(folder))
    assert code == 0, err
    assert out.splitlines()[0] == "nothing was running"
    removed = out.splitlines()[1].removeprefix("removed: ").split(", ")
    assert sorted(removed) == sorted(str(folder / n) for n in ("pki", "etcd", "kubeconfigs", "kubeconfig", "kubelet",
                                                                 "volumes", "logs"))
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_down_purge_is_refused_while_a_process_of_the_cluster_runs(tmp_path):
    import os
    import subprocess
    import sys

    from generator.controlplane import lifecycle
    from generator.controlplane.layout import MARKER, Layout

    folder = tmp_path / "cluster"
    (folder / "pki").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            env={**os.environ, MARKER: str(folder)}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"  # exec'd: its environment is the marked one
        with pytest.raises(lifecycle.UserError) as refused:
            lifecycle.purge(Layout(folder))
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

    from generator.controlplane.kubelet import cgroups

    where = cgroups.Hierarchies.find()
    if os.geteuid() != 0 or where.v2 is None:
        pytest.skip("needs root and a writable cgroup v2")
    folder = tmp_path / "cluster"
    folder.mkdir()
    # As the node starts a container: in the cluster's cgroup; then it leaves its session, with a clean env.
    container = cgroups.Container(where, cgroups.cluster_name(folder), "pod-uid", "app")
    container.create(None, None)
    escaped = subprocess.Popen(["setsid", "env", "-i", "sleep", "60"], preexec_fn=container.join)
    try:
        _state(folder, None, {})
        code, out, err = run("cluster", "down", "--dir", str(folder))
        assert code == 0, err
        assert escaped.wait(timeout=10) == -9
        assert f"pid {escaped.pid} (a pod's, left behind, killed)" in out
        assert not any(f.exists() for f in cgroups.cluster_folders(folder, where))
    finally:
        escaped.kill()
        escaped.wait()


@pytest.mark.parametrize(("args", "message"), [
    (["--kueue", "--kueue-quota", "cpu"], "Invalid value for '--kueue-quota': 'cpu': write RESOURCE=QUANTITY"),
    (["--kueue", "--kueue-quota", "gpu=1"], "RESOURCE one of cpu, memory, nvidia.com/gpu"),
    (["--kueue-quota", "cpu=2"], "--kueue-quota sizes Kueue's ClusterQueue: add --kueue"),
])
def test_a_bad_kueue_quota_is_refused_before_anything_starts(args, message, tmp_path):
    code, out, err = run("cluster", "up", "--dir", str(tmp_path / "cluster"), *args)
    assert code == 2 and out == "" and message in " ".join(err.split()), err
    assert not (tmp_path / "cluster").exists()
