"""Installs from Debian's packages take turns: `make e2e` builds the images and the real node side by
side, and each may run apt-get, which fails at once while another holds its lock. apt-get here is a
stand-in on PATH that fails as apt-get does when a second one runs beside it (a test installs nothing)."""
from __future__ import annotations

import threading

from generator import debian

APT_GET = """#!/bin/sh
echo "$*" >> "{log}"
if ! mkdir "{held}" 2>/dev/null; then
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)" >&2
    exit 100
fi
sleep 0.3
rmdir "{held}"
{fail}
"""


def fake_apt_get(tmp_path, monkeypatch, fail: str = "") -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "apt-get"
    script.write_text(APT_GET.format(log=tmp_path / "calls", held=tmp_path / "held", fail=fail))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path / "cache"))


def test_two_installs_at_once_take_turns_instead_of_failing_on_apts_lock(tmp_path, monkeypatch):
    fake_apt_get(tmp_path, monkeypatch)
    results = []
    installs = [threading.Thread(target=lambda p=p: results.append(debian.install([p]))) for p in ("runc", "podman")]
    for thread in installs:
        thread.start()
    for thread in installs:
        thread.join()
    assert results == [None, None]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4 and all(c.startswith("-o DPkg::Lock::Timeout=600 ") for c in calls)
    # Each install's update is followed by its own install, never by the other's update.
    assert [c.split()[2] for c in calls] == ["update", "install", "update", "install"]


def test_a_failed_apt_get_says_which_step_and_its_last_words(tmp_path, monkeypatch):
    fake_apt_get(tmp_path, monkeypatch, fail='echo "E: Unable to locate package nosuch" >&2; exit 100')
    assert debian.install(["nosuch"]) == "`apt-get update` failed:\nE: Unable to locate package nosuch"
