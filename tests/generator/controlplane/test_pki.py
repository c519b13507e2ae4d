"""The cluster's keys are its owner's alone from the moment they exist."""
from __future__ import annotations

import os
import stat

import pytest

from generator.controlplane import pki


def test_keys_are_owner_only_from_the_start_in_an_owner_only_folder(tmp_path, monkeypatch):
    folder = tmp_path / "pki"
    modes = []
    real_open = os.open

    def watching(path, flags, mode=0o777, *args, **kwargs):  # the mode each key file is created with
        if str(path).endswith(".key"):
            modes.append(mode)
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", watching)
    old = os.umask(0)  # the widest umask a user may have: the modes must not depend on it
    try:
        ca = pki.Authority(folder)
        _, key = ca.issue("admin", "admin")
        private, _ = pki.service_account_key(folder)
    finally:
        os.umask(old)
    assert modes and set(modes) == {0o600}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in (ca.key_path, key, private):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_key_is_never_written_through_a_symlink(tmp_path):
    folder = tmp_path / "pki"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not a key")
    (folder / "ca.key").symlink_to(elsewhere)
    with pytest.raises(OSError):
        pki.Authority(folder)
    assert elsewhere.read_text() == "not a key"
