"""The registry's own configuration as `cluster up` and `image registry up` write it, read from the
files on disk: it listens on loopback alone, requires and verifies a client certificate signed by
its own CA (the one it hands its clients), and keeps its folder 0700 and every file in it 0600,
since the machine is shared and the registry holds users' own code. The running registry answering
only that certificate is tests/e2e/test_images.py's."""
from __future__ import annotations

import ipaddress
import json
import stat

import pytest
from cryptography import x509

from generator.controlplane import pki, registry
from generator.images.registry import Registry


@pytest.fixture
def reg(tmp_path):
    reg = Registry(tmp_path / "registry")
    registry._files(reg)
    return reg


def test_it_listens_on_loopback_alone(reg):
    host, _, port = json.loads(reg.config.read_text())["http"]["addr"].rpartition(":")
    assert ipaddress.ip_address(host).is_loopback and int(port) == reg.read_state()["port"]


def test_it_requires_and_verifies_the_client_certificate_its_clients_hold(reg):
    tls = json.loads(reg.config.read_text())["http"]["tls"]
    assert tls["clientauth"] == "require-and-verify-client-cert"
    (ca_path,) = tls["clientcas"]
    ca = x509.load_pem_x509_certificate(open(ca_path, "rb").read())
    client = x509.load_pem_x509_certificate((reg.certs / "client.cert").read_bytes())
    assert pki._signed_by(client, ca)
    assert (reg.certs / "ca.crt").read_bytes() == open(ca_path, "rb").read()  # the CA its clients trust


def test_its_folders_are_0700_and_its_keys_config_and_state_0600(reg):
    """Certificates are public (0644 as pki writes them, behind the 0700 folders); everything
    else (keys, the config with its secret, the state) is the user's alone."""
    registry._files(reg)  # written again over the first (a restart): the modes hold
    assert stat.S_IMODE(reg.root.stat().st_mode) == 0o700
    for path in reg.root.rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert not path.is_symlink()
        if path.is_dir():
            assert mode == 0o700, f"{path}: {oct(mode)}"
        elif path.suffix in (".crt", ".cert"):
            assert mode & 0o022 == 0, f"{path}: {oct(mode)}"
        else:
            assert mode == 0o600, f"{path}: {oct(mode)}"


def test_a_state_that_cannot_be_written_leaves_no_temp_file(tmp_path):
    from tests.support.full_disk import full_folder, left

    with full_folder(tmp_path) as full:
        with pytest.raises(OSError):
            registry._save(Registry(full), port=5000, secret="s" * 8192, pid=None)
        assert left(full) == []
