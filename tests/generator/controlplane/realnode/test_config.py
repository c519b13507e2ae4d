"""The real node's configuration, built from one description without starting anything: what
containerd, the CNI bridge and the kubelet are told, as a user debugging the node would read it
in the cluster's folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from generator.controlplane import build, components
from generator.controlplane.layout import Layout
from generator.controlplane.realnode import cgroups, config, packaged
from generator.controlplane.state import NodeOptions

# The standard library reads TOML from Python 3.11 on.
tomllib = pytest.importorskip("tomllib", reason="reading TOML needs Python 3.11's tomllib")
PORTS = components.Ports(etcd=2379, etcd_peer=2380, apiserver=6443, controller_manager=10257, scheduler=10259)


def real_node(root: Path, mirror: config.Mirror | None = None) -> config.RealNode:
    cp = components.ControlPlane(Layout(root), "10.244.7.1", "pjk0000", "10.244.7.0/24", PORTS, "box",
                                 NodeOptions())
    return config.RealNode(cp, config.NodePorts(kubelet=10250, healthz=10248, dns_ready=8181), Path("/usr/sbin/runc"),
                           Path("/usr/lib/cni"), mirror)


@pytest.fixture
def node(tmp_path) -> config.RealNode:
    return real_node(tmp_path / "c")


def test_pods_get_the_upper_half_of_the_clusters_subnet_on_a_bridge_of_the_nodes_namespace(node):
    got = json.loads(config.cni_conflist(node))
    assert got["cniVersion"] == "1.0.0" and got["name"] == "pjk0000"
    (bridge,) = got["plugins"]
    # Inside the node's namespace: the host's bridge (the API server's) keeps the lower half.
    assert (bridge["type"], bridge["bridge"]) == ("bridge", "pods")
    assert (bridge["isGateway"], bridge["ipMasq"], bridge["hairpinMode"]) == (True, False, True)
    assert bridge["ipam"] == {"type": "host-local", "dataDir": str(node.layout.root / "node" / "cni" / "ipam"),
                              "ranges": [[{"subnet": "10.244.7.128/25", "gateway": "10.244.7.129"}]],
                              "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.7.129"}]}


def test_containerd_runs_each_cni_plugin_in_the_nodes_network_namespace(node):
    launchers = config.cni_launchers(node)
    folder = node.layout.root / "node" / "cni" / "bin"
    assert set(launchers) == {folder / p for p in packaged.CNI_PLUGINS}
    assert launchers[folder / "bridge"] == ('#!/bin/sh\nexec /usr/bin/nsenter --net=/run/netns/pjk0000-node -- '
                                           '/usr/lib/cni/bridge "$@"\n')
    toml = tomllib.loads(config.containerd_config(node))
    assert toml["plugins"]["io.containerd.cri.v1.runtime"]["cni"]["bin_dirs"] == [str(folder)]


def test_the_nodes_namespace_joins_the_hosts_bridge_next_to_the_api_server(node):
    net = node.network
    assert (net.name, net.host_veth) == ("pjk0000-node", "pjk0000n")
    # The API server, the kubelet and CoreDNS listen on the host's address; the node is the pods' next hop.
    assert (net.host_address, net.address) == (node.address, "10.244.7.2")
    assert (net.pod_cidr, net.pod_gateway) == ("10.244.7.128/25", "10.244.7.129")
    assert net.enter(["iptables", "-S"]) == ["/usr/bin/nsenter", "--net=/run/netns/pjk0000-node", "--", "iptables", "-S"]


def test_the_kubelet_runs_in_the_clusters_cgroup_with_cgroupfs_and_leaves_iptables_alone(node):
    got = yaml.safe_load(config.kubelet_config(node))
    assert (got["apiVersion"], got["kind"]) == ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")
    assert got["cgroupDriver"] == "cgroupfs"
    assert got["cgroupRoot"] == f"/{cgroups.cluster_name(node.layout.root)}/node"
    assert (got["failCgroupV1"], got["failSwapOn"], got["makeIPTablesUtilChains"]) == (False, False, False)
    assert got["protectKernelDefaults"] is False
    socket = f"unix://{node.layout.root}/node/containerd/containerd.sock"
    assert got["containerRuntimeEndpoint"] == got["imageServiceEndpoint"] == socket
    assert got["podLogsDir"] == str(node.layout.root / "node" / "pod-logs")
    assert "systemReserved" not in got  # the whole machine, as its kubelet measures it


def test_the_kubelet_reserves_what_cluster_up_keeps_from_the_pods(node):
    from dataclasses import replace

    got = yaml.safe_load(config.kubelet_config(replace(node, reserved=(("cpu", "1000m"), ("memory", "1073741824")))))
    assert got["systemReserved"] == {"cpu": "1000m", "memory": "1073741824"}
    assert got["evictionHard"]["memory.available"] == "100Mi"


def test_the_kubelet_answers_only_clients_the_clusters_ca_signed_and_the_api_server_authorizes(node):
    got = yaml.safe_load(config.kubelet_config(node))
    pki = node.layout.pki
    assert got["authentication"] == {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                                     "x509": {"clientCAFile": str(pki / "ca.crt")}}
    assert got["authorization"] == {"mode": "Webhook"}
    assert (got["address"], got["port"], got["readOnlyPort"]) == ("10.244.7.1", 10250, 0)
    assert (got["healthzBindAddress"], got["healthzPort"]) == ("127.0.0.1", 10248)
    assert (got["tlsCertFile"], got["tlsPrivateKeyFile"]) == (str(pki / "kubelet-serving-box.crt"),
                                                              str(pki / "kubelet-serving-box.key"))
    cert = config.serving_certificate(node)
    assert (cert.stem, cert.cn, cert.org, cert.server, cert.ips) == (
        "kubelet-serving-box", "system:node:box", "system:nodes", True, ("10.244.7.1",))


def test_the_kubelet_registers_as_its_node_with_the_node_certificate(node):
    kubelet = config.kubelet(node)
    flags = dict(a[2:].split("=", 1) for a in kubelet.argv[1:])
    root = node.layout.root
    assert kubelet.argv[0] == str(build.binary("kubelet"))
    assert flags == {"config": str(root / "node" / "kubelet-config.yaml"),
                     "kubeconfig": str(root / "kubeconfigs" / "kubelet-box.yaml"), "root-dir": str(root / "node" / "kubelet"),
                     "cert-dir": str(root / "node" / "kubelet" / "pki"), "hostname-override": "box",
                     "node-ip": "10.244.7.1", "node-labels": "pytorchjob-kit/node=real"}  # diagnose knows its pulls
    kubeconfig = yaml.safe_load(kubelet.files[root / "kubeconfigs" / "kubelet-box.yaml"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://10.244.7.1:6443"
    # The certificates step issues kubelet-<node> as system:node:<node> in system:nodes.
    assert kubeconfig["users"][0]["user"]["client-certificate"] == str(root / "pki" / "kubelet-box.crt")
    issued = {c.stem: c for c in components.certificates(node.control_plane)}
    assert (issued["kubelet-box"].cn, issued["kubelet-box"].org) == ("system:node:box", "system:nodes")
    assert kubelet.env == {config.NODE_MARKER: str(root / "node")}  # `cluster node kill` finds it by this


def test_each_of_several_nodes_has_its_folder_identity_cgroup_and_pods_block(node):
    import dataclasses

    cp = dataclasses.replace(node.control_plane, node=dataclasses.replace(node.control_plane.node, count=3))
    third = dataclasses.replace(node, control_plane=cp, index=2)
    root = node.layout.root
    kubelet = config.kubelet(third)
    flags = dict(a[2:].split("=", 1) for a in kubelet.argv[1:])
    assert (flags["hostname-override"], flags["root-dir"]) == ("box-node3", str(root / "node3" / "kubelet"))
    assert flags["kubeconfig"] == str(root / "kubeconfigs" / "kubelet-box-node3.yaml")
    got = yaml.safe_load(config.kubelet_config(third))
    assert got["cgroupRoot"].endswith("/node3") and got["podLogsDir"] == str(root / "node3" / "pod-logs")
    assert json.loads(config.cni_conflist(third))["plugins"][0]["ipam"]["ranges"] == [
        [{"subnet": "10.244.7.192/27", "gateway": "10.244.7.193"}]]
    issued = {c.stem for c in components.certificates(cp)}
    assert {"kubelet-box", "kubelet-box-node2", "kubelet-box-node3"} <= issued


def test_a_shortened_grace_period_shortens_the_kubelets_lease_and_the_node_monitors_grace():
    assert config.lease(None) == {}
    assert config.lease(10) == {"nodeLeaseDurationSeconds": 8}  # renewed every 2 s
    assert config.lease(50) == {"nodeLeaseDurationSeconds": 40}  # Kubernetes' own


def test_containerd_is_started_with_its_config_and_finds_its_shim(node):
    containerd = config.containerd(node)
    folder = node.layout.root / "node"
    assert containerd.argv == [str(build.binary("containerd")), "--config", str(folder / "containerd" / "config.toml")]
    assert containerd.env["PATH"].split(":")[0] == str(build.binary("containerd-shim-runc-v2").parent)
    assert set(containerd.files) == {folder / "containerd" / "config.toml", folder / "cni" / "net.d" / config.CNI_CONFLIST}


def test_a_folder_too_deep_for_containerds_sockets_is_refused_naming_the_socket(tmp_path):
    deep = tmp_path / ("d" * 100)
    with pytest.raises(ValueError, match=r"containerd\.sock\.ttrpc is \d+ characters, over the 107 .* shorter folder"):
        config.check_sockets(config.Folders.of(Layout(deep)))
    config.check_sockets(config.Folders.of(Layout(Path("/tmp/c"))))
