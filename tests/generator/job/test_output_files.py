"""`-o FILE` writes where the user pointed: through a symlink, keeping a file's mode, and never
replacing a device, a pipe or a folder with a regular file."""
from __future__ import annotations

import os
import stat

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
