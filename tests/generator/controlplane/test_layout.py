"""The cluster's folder: `cluster up` takes only a new or empty folder, or a cluster's own, of the
user running it, and never changes another's folder or follows a link to one."""
from __future__ import annotations

import os
import stat

import pytest

from generator.controlplane.layout import MARK_FILE, Layout
from generator.errors import UserError

OTHER_USER = 65534


def test_a_new_folder_is_made_0700_and_marked_as_a_clusters(tmp_path):
    layout = Layout(tmp_path / "a" / "cluster")
    layout.check_ours()  # no folder yet: nothing to remove, nothing refused
    layout.create()
    assert stat.S_IMODE(layout.root.stat().st_mode) == 0o700 and (layout.root / MARK_FILE).is_file()
    (layout.root / "pki").mkdir()
    layout.create()  # its own folder again: taken
    layout.check_ours()


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another user's needs root to make (chown)")
def test_another_users_folder_is_not_taken_nor_changed_even_empty_or_marked(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / MARK_FILE).write_text("")
    os.chown(theirs, OTHER_USER, OTHER_USER)
    with pytest.raises(UserError) as refused:
        Layout(theirs).create()
    assert str(refused.value) == (f"{theirs} belongs to uid {OTHER_USER}, not to you (uid 0); name a folder of your "
                                  "own with --dir")
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o755 and os.listdir(theirs) == [MARK_FILE]
    with pytest.raises(UserError, match="nothing was removed"):
        Layout(theirs).check_ours()


def test_a_link_to_a_folder_is_not_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    link = tmp_path / "cluster"
    link.symlink_to(real)
    with pytest.raises(UserError) as refused:
        Layout(link).create()
    assert str(refused.value) == f"{link} is a symbolic link; name the cluster's folder itself with --dir"
    assert stat.S_IMODE(real.stat().st_mode) == 0o755 and os.listdir(real) == []


def test_a_folder_of_other_files_is_not_taken(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir(mode=0o755)
    (folder / "etcd").mkdir()
    with pytest.raises(UserError) as refused:
        Layout(folder).create()
    assert str(refused.value) == (f"{folder} holds files, and no cluster made it (it has no {MARK_FILE}); name a new "
                                  "or empty folder with --dir, or the folder of a cluster that `cluster up` made")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755 and os.listdir(folder) == ["etcd"]


def test_a_cluster_folder_an_earlier_version_made_is_still_its_own(tmp_path):
    """Before the marker, a cluster's folder held its state file: taken, and marked from then on."""
    from generator.controlplane import state

    folder = tmp_path / "cluster"
    folder.mkdir()
    state.save(folder / "state.json", state.ClusterState(phase="stopped", pid=None))
    Layout(folder).check_ours()
    Layout(folder).create()
    assert (folder / MARK_FILE).is_file()
