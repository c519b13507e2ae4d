"""`-o FILE` writes where the user pointed: through the user's own symlink, never through another
user's, keeping a file's mode, and never replacing a device, a pipe or a folder with a regular file."""
from __future__ import annotations

import os
import stat

import pytest

from tests.support.cli_helpers import run

VALUES = "job: {name: demo}\ntopology: {workers: 1}\n"


def render_to(tmp_path, target) -> tuple[int, str]:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    code, _, err = run("render", str(values), "-o", str(target))
    return code, err


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "manifests" / "demo.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "current.yaml"
    link.symlink_to(real)
    code, err = render_to(tmp_path, link)
    assert code == 0, err
    assert link.is_symlink() and "kind: PyTorchJob" in real.read_text()


def test_an_existing_file_keeps_its_mode_and_a_new_one_gets_the_umasks(tmp_path):
    kept = tmp_path / "kept.yaml"
    kept.write_text("old\n")
    kept.chmod(0o640)
    assert render_to(tmp_path, kept)[0] == 0
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and "kind: PyTorchJob" in kept.read_text()
    old = os.umask(0o022)
    try:
        assert render_to(tmp_path, tmp_path / "new.yaml")[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o644


def test_a_device_a_pipe_or_a_folder_is_refused_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, kind in ((fifo, "not a regular file"), ("/dev/null", "not a regular file"), (tmp_path, "a directory")):
        code, err = render_to(tmp_path, target)
        assert code == 1 and f"{target}: is {kind}" in err and "leave out -o to print to stdout" in err
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


OTHER_USER = 65534  # nobody: the links below are "planted" by another user of the machine
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root (lchown)")


def secret_file(tmp_path):
    """A 0600 file in a 0700 folder: what a planted link would have root overwrite."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret"
    secret.write_text("secret\n")
    secret.chmod(0o600)
    return secret


@needs_root
def test_another_users_link_at_the_output_path_is_refused_and_its_target_left_alone(tmp_path):
    secret = secret_file(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = shared / "report.yaml"
    link.symlink_to(secret)
    os.lchown(link, OTHER_USER, OTHER_USER)
    code, err = render_to(tmp_path, link)
    assert code == 1 and f"{link}: it is a symbolic link (to {secret}) made by uid {OTHER_USER}, not by you" in err
    assert "not written through; name the file itself" in err and "Traceback" not in err
    assert secret.read_text() == "secret\n" and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert link.is_symlink() and os.listdir(shared) == ["report.yaml"]  # no temp file left either


@needs_root
def test_another_users_link_as_the_output_folder_is_refused(tmp_path):
    secret = secret_file(tmp_path)
    folder = tmp_path / "out"
    folder.symlink_to(secret.parent)
    os.lchown(folder, OTHER_USER, OTHER_USER)
    code, err = render_to(tmp_path, folder / "secret")
    assert code == 1 and f"its folder {folder} is a symbolic link (to {secret.parent}) made by uid {OTHER_USER}" in err
    assert secret.read_text() == "secret\n" and os.listdir(secret.parent) == ["secret"]


def test_the_users_own_link_to_a_folder_is_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    assert render_to(tmp_path, tmp_path / "out" / "job.yaml")[0] == 0
    assert "kind: PyTorchJob" in (real / "job.yaml").read_text() and sorted(os.listdir(real)) == ["job.yaml"]


def test_a_full_disk_is_named_with_the_file_and_leaves_no_temp_file(tmp_path):
    from tests.support.full_disk import full_folder, left

    with full_folder(tmp_path) as full:
        code, err = render_to(tmp_path, full / "job.yaml")
        assert code == 1 and "Traceback" not in err, err
        assert f"{full / 'job.yaml'}" in err and "No space left on device" in err, err
        assert left(full) == []
        (full / "kept.yaml").write_bytes(b"")  # an empty file takes no space
        code, err = render_to(tmp_path, full / "kept.yaml")
        assert code == 1 and left(full) == ["kept.yaml"] and (full / "kept.yaml").read_bytes() == b""
