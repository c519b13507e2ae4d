"""The registry's own configuration as `cluster up` and `image registry up` write it, read from the
files on disk: it listens on loopback alone, requires and verifies a client certificate signed by
its own CA (the one it hands its clients), and keeps its folder 0700 and every file in it 0600,
since the machine is shared and the registry holds users' own code. Its read-only twin, which the
nodes pull from, does the same with a CA of its own, over the same storage, refusing every write.
The running registry answering only that certificate is tests/e2e/test_images.py's; the node's
key refused by the writable one and pulling from the read-only one, tests/e2e/test_security.py's."""
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
    registry._files(reg.readonly)
    return reg


def config(reg: Registry) -> dict:
    return json.loads(reg.config.read_text())


def client_ca(reg: Registry) -> x509.Certificate:
    (ca_path,) = config(reg)["http"]["tls"]["clientcas"]
    return x509.load_pem_x509_certificate(open(ca_path, "rb").read())


def client(reg: Registry) -> x509.Certificate:
    return x509.load_pem_x509_certificate((reg.certs / "client.cert").read_bytes())


@pytest.mark.parametrize("which", ["writable", "readonly"])
def test_it_listens_on_loopback_alone(reg, which):
    one = reg if which == "writable" else reg.readonly
    host, _, port = config(one)["http"]["addr"].rpartition(":")
    assert ipaddress.ip_address(host).is_loopback and int(port) == one.read_state()["port"]


@pytest.mark.parametrize("which", ["writable", "readonly"])
def test_it_requires_and_verifies_the_client_certificate_its_clients_hold(reg, which):
    one = reg if which == "writable" else reg.readonly
    tls = config(one)["http"]["tls"]
    assert tls["clientauth"] == "require-and-verify-client-cert"
    assert pki._signed_by(client(one), client_ca(one))
    assert (one.certs / "ca.crt").read_bytes() == open(tls["clientcas"][0], "rb").read()  # the CA its clients trust


def test_the_read_only_twin_serves_the_same_storage_and_refuses_every_write(reg):
    writable, readonly = config(reg)["storage"], config(reg.readonly)["storage"]
    assert readonly["filesystem"] == writable["filesystem"] == {"rootdirectory": str(reg.root / "storage")}
    assert readonly["maintenance"]["readonly"] == {"enabled": True}
    # Not even stale uploads are removed by it: the writable one purges them.
    assert readonly["maintenance"]["uploadpurging"] == {"enabled": False}
    assert readonly["delete"] == {"enabled": False}
    # The writable one still pushes and deletes (image load replaces, tests forget their images).
    assert writable["delete"] == {"enabled": True} and "maintenance" not in writable
    assert config(reg.readonly)["http"]["secret"] != config(reg)["http"]["secret"]


def test_neither_registry_takes_the_others_client(reg):
    """The node holds the read-only registry's client: the writable registry, which pushes and
    deletes, refuses it at the TLS handshake, as the read-only one refuses the writable's."""
    assert client_ca(reg).subject != client_ca(reg.readonly).subject
    assert not pki._signed_by(client(reg.readonly), client_ca(reg))
    assert not pki._signed_by(client(reg), client_ca(reg.readonly))
    assert (reg.certs / "client.key").read_bytes() != (reg.readonly.certs / "client.key").read_bytes()


def test_its_folders_are_0700_and_its_keys_config_and_state_0600(reg):
    """Certificates are public (0644 as pki writes them, behind the 0700 folders); everything
    else (keys, the config with its secret, the state) is the user's alone."""
    registry._files(reg)  # written again over the first (a restart): the modes hold
    registry._files(reg.readonly)
    assert stat.S_IMODE(reg.root.stat().st_mode) == 0o700
    assert (reg.readonly.certs / "client.key").is_file()  # the read-only twin's folder is inside, walked too
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
