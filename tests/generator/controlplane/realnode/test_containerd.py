"""containerd's files for the real node: its config.toml keeps everything in the cluster's folder
and runs pods with runc on cgroupfs, and each registry name the machine's registry holds is pulled
from it over mutual TLS."""
from __future__ import annotations

import pytest

from generator.controlplane import pins
from generator.controlplane.realnode import config, containerd
from tests.generator.controlplane.realnode.test_config import real_node

tomllib = pytest.importorskip("tomllib", reason="reading TOML needs Python 3.11's tomllib")


@pytest.fixture
def node(tmp_path) -> config.RealNode:
    return real_node(tmp_path / "c")


def test_containerd_keeps_root_state_and_sockets_in_the_clusters_folder(node):
    got = tomllib.loads(containerd.containerd_config(node))
    folder = node.layout.root / "node" / "containerd"
    assert got["version"] == 3
    assert (got["root"], got["state"]) == (str(folder / "root"), str(folder / "state"))
    assert got["grpc"]["address"] == str(folder / "containerd.sock")
    assert got["ttrpc"]["address"] == str(folder / "containerd.sock.ttrpc")
    assert got["debug"]["address"] == str(folder / "debug.sock")
    # NRI's socket and the opt plugin's folder would be the machine's.
    assert got["disabled_plugins"] == ["io.containerd.nri.v1.nri"]
    assert got["plugins"]["io.containerd.internal.v1.opt"] == {"path": str(folder / "opt")}


def test_containerd_runs_pods_with_runc_on_cgroupfs_overlayfs_and_the_pause_image(node):
    plugins = tomllib.loads(containerd.containerd_config(node))["plugins"]
    images, runtime = plugins["io.containerd.cri.v1.images"], plugins["io.containerd.cri.v1.runtime"]
    assert images["snapshotter"] == "overlayfs"
    assert images["pinned_images"] == {"sandbox": pins.PAUSE_IMAGE}
    # Each cluster keeps an image once, unpacked: the registry on this machine has the blobs.
    assert images["discard_unpacked_layers"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runtime["containerd"]["default_runtime_name"] == "runc"
    assert runc == {"runtime_type": "io.containerd.runc.v2",
                    "options": {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False,
                                "Root": str(node.layout.root / "node" / "containerd" / "state" / "runc")}}
    # Root without CAP_SYS_RESOURCE cannot lower oom_score_adj below containerd's own.
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    cni = node.layout.root / "node" / "cni"
    # The launchers that run the machine's plugins in the node's network namespace (config.cni_launchers).
    assert runtime["cni"] == {"bin_dirs": [str(cni / "bin")], "conf_dir": str(cni / "net.d"),
                              "max_conf_num": 1}
    assert plugins["io.containerd.grpc.v1.cri"] == {"stream_server_address": "127.0.0.1", "stream_server_port": "0"}


MIRROR = config.Mirror("127.0.0.1:5000", ("docker.io", "ghcr.io", "localhost:5001", "us-central1-docker.pkg.dev"))


def test_each_registry_name_the_machines_registry_holds_is_pulled_from_it_over_mutual_tls(tmp_path):
    node = real_node(tmp_path / "c", MIRROR)
    hosts_dir = tomllib.loads(containerd.containerd_config(node))["plugins"]["io.containerd.cri.v1.images"]["registry"]
    certs_d = tmp_path / "c" / "node" / "certs.d"
    assert hosts_dir == {"config_path": str(certs_d)}
    files = containerd.registry_hosts(node)
    # containerd looks a name up as its folder; host:port is written host_port_.
    assert sorted(files) == [certs_d / d / "hosts.toml" for d in
                             ("docker.io", "ghcr.io", "localhost_5001_", "us-central1-docker.pkg.dev")]
    client = tmp_path / "c" / "node" / "registry-client"
    # The registry holds ghcr.io/kubeflow/x as that repository: the name's registry is the first part of the path.
    assert tomllib.loads(files[certs_d / "ghcr.io" / "hosts.toml"]) == {"host": {"https://127.0.0.1:5000/v2/ghcr.io": {
        "capabilities": ["pull", "resolve"], "ca": str(client / "ca.crt"),
        "client": [[str(client / "client.cert"), str(client / "client.key")]], "override_path": True}}}
    docker = tomllib.loads(files[certs_d / "docker.io" / "hosts.toml"])
    assert list(docker["host"]) == ["https://127.0.0.1:5000/v2/docker.io"]
    # No `server`: a name the registry lacks is then asked of its own registry, as with any mirror.
    assert "server" not in docker
    assert set(config.containerd(node).files) >= set(files)


def test_without_a_registry_no_name_is_redirected(tmp_path):
    assert containerd.registry_hosts(real_node(tmp_path / "d")) == {}


def test_toml_quotes_keys_with_dots_and_writes_nested_tables():
    text = containerd.toml({"a": 1, "b": {"c.d": {"e": ["x"], "f": True}}, "g": {"h": "i"}})
    assert tomllib.loads(text) == {"a": 1, "b": {"c.d": {"e": ["x"], "f": True}}, "g": {"h": "i"}}
