"""A container's command line, env and folder as a process on this machine's filesystem: what
both `generator run` and the node start for the trainer (test_parity.py compares the two)."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from generator.container.command import ENTRYPOINT, NoCommand, PathError, on_host
from generator.container.ports import free_port

MOUNTS = {"/data": Path("/runs/job/results"), "/data/cache": Path("/runs/job/pods/master-0/cache")}
OWN = Path("/runs/job/pods/master-0")


def test_no_command_runs_the_images_entrypoint_with_this_interpreter_and_its_own_output_folder():
    host = on_host(ENTRYPOINT, {"args": ["--epochs=$(N)"]}, {"N": "3"}, {}, OWN)
    assert host.argv == [sys.executable, "-m", "trainer", "--epochs=3"]
    assert host.env == {"N": "3", "OUTPUT_DIR": str(OWN / "output")}  # never the image's /opt/pytorch/output here
    assert host.cwd is None


def test_without_output_dir_the_trainer_writes_to_the_volume_at_its_default_else_its_own_folder():
    """Whatever starts it: a Trainer v2 node runs torchrun, and must not write to this machine's
    /opt/pytorch/output."""
    torchrun = {"command": ["torchrun", "--module", "trainer"]}
    assert on_host(ENTRYPOINT, torchrun, {}, MOUNTS, OWN).env == {"OUTPUT_DIR": str(OWN / "output")}
    claim = {"/opt/pytorch/output": Path("/runs/job/results")}
    for container in ({}, torchrun):
        assert on_host(ENTRYPOINT, container, {}, claim, OWN).env == {"OUTPUT_DIR": "/runs/job/results"}


def test_mount_paths_become_folders_after_expansion_the_deepest_mount_first():
    container = {"command": ["torchrun", "--nproc-per-node=1", "--module", "trainer"],
                 "args": ["--data=$(ROOT)/x", "/data/cache/y", "PATHS=a:/data", "/database"]}
    env = {"ROOT": "/data", "OUTPUT_DIR": "/data/out", "LIST": "a:/data/z"}
    host = on_host(ENTRYPOINT, container, env, MOUNTS, OWN)
    assert host.argv == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--module", "trainer",
                         "--data=/runs/job/results/x", "/runs/job/pods/master-0/cache/y", "PATHS=a:/runs/job/results",
                         "/database"]  # a path that only starts with a mount's letters is not under it
    assert host.env == {"ROOT": "/runs/job/results", "OUTPUT_DIR": "/runs/job/results/out", "LIST": "a:/runs/job/results/z"}


def test_what_the_runtime_gave_is_never_mapped_but_the_pods_own_value_is():
    mounts = {"/usr": Path("/runs/job/pods/master-0/usr")}
    given = {"PATH": "/usr/bin:/bin", "HOME": "/usr/home"}
    host = on_host(ENTRYPOINT, {"command": ["python"]}, {**given, "TOOLS": "/usr/tools"}, mounts, OWN, given)
    assert host.env["PATH"] == "/usr/bin:/bin" and host.env["HOME"] == "/usr/home"
    assert host.env["TOOLS"] == "/runs/job/pods/master-0/usr/tools"


def test_working_dir_is_its_volumes_folder_or_one_on_the_pods_own_disk():
    assert on_host(ENTRYPOINT, {"workingDir": "/data/run"}, {}, MOUNTS, OWN).cwd == Path("/runs/job/results/run")
    assert on_host(ENTRYPOINT, {"workingDir": "/opt/app"}, {}, MOUNTS, OWN).cwd == OWN / "workdir" / "opt" / "app"


def test_a_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


CODE = ("/workspace", Path("/home/me/proj"))  # a user image whose files are /home/me/proj


def test_a_user_images_files_are_its_folder_in_args_env_and_where_it_starts():
    container = {"command": ["torchrun", "--nproc-per-node=2", "/workspace/train.py"],
                 "args": ["--config=/workspace/conf/a.yaml", "--data", "/data/x"], "env": []}
    host = on_host((), container, {"CONF": "/workspace/conf", "OUTPUT_DIR": "/opt/out"}, MOUNTS, OWN, code=CODE)
    assert host.argv == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "/home/me/proj/train.py",
                         "--config=/home/me/proj/conf/a.yaml", "--data", "/runs/job/results/x"]
    # OUTPUT_DIR is the trainer's contract alone: your code's stays as you wrote it
    assert host.env == {"CONF": "/home/me/proj/conf", "OUTPUT_DIR": "/opt/out"}
    assert host.cwd == Path("/home/me/proj")  # `python -m pkg` and relative paths find the code
    assert on_host((), {"command": ["python", "-m", "pkg"], "workingDir": "/workspace/sub"}, {}, {}, OWN,
                   code=CODE).cwd == Path("/home/me/proj/sub")


def test_where_the_node_mounts_the_folder_its_paths_stay_as_the_image_has_them():
    container = {"command": ["python", "/workspace/train.py", "--data=/data/x"], "workingDir": "/workspace/sub"}
    host = on_host((), container, {}, MOUNTS, OWN, code=CODE, code_mounted=True)
    assert host.argv == [sys.executable, "/workspace/train.py", "--data=/runs/job/results/x"]
    assert host.cwd == Path("/workspace/sub")
    assert on_host((), {"command": ["python", "t.py"]}, {}, {}, OWN, code=CODE, code_mounted=True).cwd == Path("/workspace")


def test_a_shell_scripts_mount_paths_and_heredocs_are_mapped_word_by_word():
    script = ("set -e\ncd /data && python - <<'EOF'\nopen('/data/cache/y').read()\nEOF\n"
              "ls /database ./data x/data \"/data\" --out=/data/o $(VAR)")
    host = on_host((), {"command": ["/bin/bash", "-o", "pipefail", "-ec"], "args": [script, "/data"]},
                   {"VAR": "v"}, MOUNTS, OWN)
    assert host.argv[:4] == ["/bin/bash", "-o", "pipefail", "-ec"]
    assert host.argv[4] == ("set -e\ncd /runs/job/results && python - <<'EOF'\n"
                            "open('/runs/job/pods/master-0/cache/y').read()\nEOF\n"
                            'ls /database ./data x/data "/runs/job/results" --out=/runs/job/results/o v')
    assert host.argv[5] == "/runs/job/results"  # $0 of the script: an arg, mapped as any arg is
    # a script file is the shell's to read: its name maps, its text is not ours to change
    assert on_host((), {"command": ["sh", "/data/run.sh"]}, {}, MOUNTS, OWN).argv == ["sh", "/runs/job/results/run.sh"]


def test_a_user_image_without_a_command_cannot_start_here():
    with pytest.raises(NoCommand, match="sets no command, and this machine does not know the image's ENTRYPOINT"):
        on_host((), {"args": ["--backend", "gloo"]}, {}, {}, OWN)


def test_the_images_own_python_and_torchrun_paths_are_this_interpreter():
    assert on_host((), {"command": ["/opt/conda/bin/python3.11", "-u", "t.py"]}, {}, {}, OWN).argv == [
        sys.executable, "-u", "t.py"]
    assert on_host((), {"command": ["/usr/local/bin/torchrun", "t.py"]}, {}, {}, OWN).argv[:3] == [
        sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.parametrize("folder", ["../../etc", "/opt/../../etc", "/data/../../../etc/nologin"])
def test_a_working_dir_with_dot_dot_is_refused_naming_the_field(folder):
    with pytest.raises(PathError) as refused:
        on_host(ENTRYPOINT, {"workingDir": folder}, {}, MOUNTS, OWN)
    assert (refused.value.field, str(refused.value)) == (
        "workingDir", f'workingDir is "{folder}", which contains "..": refused, as it would lead out of the pod\'s '
                      "own folders; write the path without '..'")


def test_a_working_dir_is_normalised_before_it_is_joined_under_the_pods_folder():
    assert on_host(ENTRYPOINT, {"workingDir": "opt//./app/"}, {}, MOUNTS, OWN).cwd == OWN / "workdir" / "opt" / "app"
