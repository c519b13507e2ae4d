"""Another user of the machine (uid 65534) cannot have root work in a folder they control: a
`--dir` below their folder, through a link, or their own folder with a forged state file is refused
before anything there is read, started, written or deleted; the cache likewise."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from generator import paths
from generator.controlplane import state
from generator.controlplane.layout import MARK_FILE, Layout
from generator.errors import UserError
from tests.support.cli_helpers import run

OTHER_USER = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's folders need root to make (setuid, chown)")


def as_other_user(*argv: str) -> None:
    """Run a command as uid 65534: the attacker's own doing, with only their rights."""
    def drop():
        os.setgid(OTHER_USER)
        os.setgroups([])
        os.setuid(OTHER_USER)

    subprocess.run(argv, check=True, preexec_fn=drop)


@pytest.fixture
def machine():
    """A folder in /tmp the other user can reach, with `home` theirs (0755), `root` root's and `tmp` as /tmp (1777)."""
    base = Path(tempfile.mkdtemp(prefix="pytorchjob-kit-foreign-", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "home").mkdir(mode=0o755)
    os.chown(base / "home", OTHER_USER, OTHER_USER)
    (base / "root").mkdir(mode=0o755)
    (base / "tmp").mkdir()
    os.chmod(base / "tmp", 0o1777)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def test_a_cluster_folder_below_another_users_folder_is_refused_with_nothing_made_there(machine):
    """The review's attack: root made `--dir` below the other user's folder, they swapped it for one of their own."""
    as_other_user("mkdir", "-m", "0777", str(machine / "home" / "shared"))
    folder = machine / "home" / "shared" / "cluster"
    with pytest.raises(UserError) as refused:
        Layout(folder).create()
    assert f"{machine / 'home'} belongs to uid {OTHER_USER}, neither you (uid 0) nor root" in str(refused.value)
    assert os.listdir(machine / "home" / "shared") == []
    code, out, err = run("cluster", "up", "--dir", str(folder))
    assert code == 1 and out == "" and f"--dir {folder}: {machine / 'home'} belongs to uid {OTHER_USER}" in err
    assert os.listdir(machine / "home" / "shared") == []


def test_a_link_anywhere_in_the_path_is_refused(machine):
    """Even the user's own link, and one the other user made in a sticky folder such as /tmp, to a folder of root's."""
    (machine / "root" / "real").mkdir()
    (machine / "mine").symlink_to(machine / "root")
    as_other_user("ln", "-s", str(machine / "root"), str(machine / "tmp" / "theirs"))
    for link in (machine / "mine", machine / "tmp" / "theirs"):
        with pytest.raises(UserError, match=f"{link} is a symbolic link, which its owner could point anywhere"):
            Layout(link / "real" / "cluster").create()
    assert os.listdir(machine / "root" / "real") == []


def test_a_folder_on_the_way_that_others_may_write_is_refused_but_a_sticky_one_like_tmp_is_not(machine):
    open_ = machine / "root" / "open"
    open_.mkdir()
    os.chmod(open_, 0o777)
    with pytest.raises(UserError, match=rf"{open_} is writable by other users \(mode 777\)"):
        Layout(open_ / "cluster").create()
    assert os.listdir(open_) == []
    os.chmod(open_, 0o1777)  # as /tmp: nobody but its owner may rename or remove the user's own folder in it
    Layout(open_ / "cluster").create()
    assert (open_ / "cluster" / MARK_FILE).is_file()


def forged(bridge: str) -> str:
    """A state file as the other user would write it, naming an interface that is not the cluster's."""
    return state.ClusterState(phase="ready", pid=1, pod_network=state.PodNetwork(bridge, "10.250.0.0/24")).to_json()


@pytest.fixture
def victim_interface():
    name = f"pjkv{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "delete", name], capture_output=True)


def interface_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def test_down_and_status_of_another_users_folder_change_nothing(machine, victim_interface):
    """Their folder in /tmp: its state file names an interface (eth0 would take the machine off the
    network), their link at the temp file's name points at root's file, their `node` link at root's folder."""
    folder = machine / "tmp" / "cluster"
    victim_file = machine / "root" / "passwd"
    victim_file.write_text("root's\n")
    (machine / "root" / "node" / "cni" / "ipam").mkdir(parents=True)
    as_other_user("sh", "-ec", 'mkdir -m 0755 "$1"; printf %s "$2" > "$1/state.json"; : > "$1/$3"; '
                  'ln -s "$4" "$1/.state.json.$5.tmp"; ln -s "$6" "$1/node"', "sh", str(folder),
                  forged(victim_interface), MARK_FILE, str(victim_file), str(os.getpid()), str(machine / "root" / "node"))
    for command in (["down"], ["down", "--purge"], ["status"]):
        code, out, err = run("cluster", *command, "--dir", str(folder))
        assert code == 1 and out == ""
        assert err.strip() == (f"error: {folder} belongs to uid {OTHER_USER}, not to you (uid 0); nothing was removed; "
                               "check --dir")
    assert interface_exists(victim_interface)
    assert victim_file.read_text() == "root's\n" and (machine / "root" / "node" / "cni" / "ipam").is_dir()
    assert json.loads((folder / "state.json").read_text())["phase"] == "ready"


def test_down_of_the_users_own_folder_deletes_only_the_interfaces_its_name_derives_from(tmp_path, victim_interface):
    folder = tmp_path / "cluster"
    Layout(folder).create()
    (folder / "state.json").write_text(forged(victim_interface))
    code, out, err = run("cluster", "down", "--dir", str(folder))
    assert code == 0, err
    assert interface_exists(victim_interface)


def test_the_state_file_is_never_written_through_a_link_at_its_temp_files_name(tmp_path):
    folder = tmp_path / "cluster"
    Layout(folder).create()
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    (folder / f".state.json.{os.getpid()}.tmp").symlink_to(victim)
    state.save(folder / "state.json", state.ClusterState(phase="stopped"))
    assert victim.read_text() == "kept\n"
    assert not (folder / "state.json").is_symlink() and state.load(folder / "state.json").phase == "stopped"


def test_roots_cache_below_another_users_folder_is_refused(machine, monkeypatch):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(machine / "home" / "cache"))
    with pytest.raises(UserError, match=f"the cache folder {machine / 'home' / 'cache'}: {machine / 'home'} belongs to "
                                        f"uid {OTHER_USER}"):
        paths.cache_dir()
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(machine / "root" / "cache"))
    assert paths.cache_dir() == machine / "root" / "cache"


def test_up_in_another_users_folder_is_refused_before_their_state_is_read(machine):
    """Their state file says a cluster is ready, its supervisor a process of theirs that carries the
    cluster's marker, with their kubeconfig: `up` must not hand it to the user as the cluster's."""
    from generator.controlplane.layout import MARKER

    folder = machine / "tmp" / "cluster"
    supervisor = subprocess.Popen(["sleep", "300"], env={MARKER: str(folder)}, preexec_fn=lambda: os.setuid(OTHER_USER))
    try:
        theirs = state.ClusterState(phase="ready", pid=supervisor.pid, server="https://10.0.0.1:6443",
                                    kubeconfig=str(folder / "their-kubeconfig")).to_json()
        as_other_user("sh", "-ec", 'mkdir -m 0755 "$1"; printf %s "$2" > "$1/state.json"; : > "$1/$3"', "sh",
                      str(folder), theirs, MARK_FILE)
        code, out, err = run("cluster", "up", "--dir", str(folder))
    finally:
        supervisor.kill()
        supervisor.wait()
    assert code == 1 and "their-kubeconfig" not in out + err
    assert f"{folder} belongs to uid {OTHER_USER}, not to you" in err
