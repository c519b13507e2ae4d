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


def test_certificates_near_their_end_are_made_anew_with_the_ca_and_what_it_signed(tmp_path, monkeypatch):
    import datetime

    from cryptography import x509

    folder = tmp_path / "pki"
    monkeypatch.setattr(pki, "VALID", pki.RENEW_BEFORE - datetime.timedelta(days=1))  # a cluster from long ago
    old_ca = pki.Authority(folder)
    old_leaf = x509.load_pem_x509_certificate(old_ca.issue("admin", "admin")[0].read_bytes())
    assert pki.Authority(folder).cert.serial_number != old_ca.cert.serial_number  # the CA ends soon: a new one
    monkeypatch.setattr(pki, "VALID", datetime.timedelta(days=365))
    ca = pki.Authority(folder)
    crt, _ = ca.issue("admin", "admin")
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    assert ca.signed(cert) and cert.issuer == ca.cert.subject  # the leaf follows the CA it is checked against
    assert cert.serial_number != old_leaf.serial_number and not ca.signed(old_leaf)
    assert ca.issue("admin", "admin") == (crt, crt.with_suffix(".key"))
    assert x509.load_pem_x509_certificate(crt.read_bytes()).serial_number == cert.serial_number  # kept while it lasts


def test_up_says_a_new_ca_is_made_when_the_old_one_ends_soon(tmp_path, monkeypatch):
    import datetime

    from generator.controlplane import lifecycle
    from generator.controlplane.layout import Layout

    layout = Layout(tmp_path / "cluster")
    monkeypatch.setattr(pki, "VALID", datetime.timedelta(days=3))
    pki.Authority(layout.pki)
    assert "ends within 30 days: making a new one" in lifecycle._old_ca(layout)  # noqa: SLF001
