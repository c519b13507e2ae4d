"""The real node's configuration as pure functions of one typed description (RealNode): the
folders it keeps under the cluster's, the CNI bridge conflist and the plugins' launchers, the
KubeletConfiguration, and the two components' argv (containerd's own files are
realnode/containerd.py's, kube-proxy's realnode/proxy.py's, CoreDNS's realnode/dns.py's).
Nothing here starts a process or writes a file; realnode/node.py does."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from generator.controlplane import build, components, pins, pki
from generator.controlplane.layout import Layout
from generator.controlplane.realnode import NODE_LABEL, NODE_LABEL_VALUE, cgroups, dns, folder_name, netns, packaged, support
from generator.controlplane.realnode.containerd import containerd_config, registry_hosts
from generator.controlplane.realnode.netns import NodeNetwork

# A unix socket's path must fit sockaddr_un.sun_path (108 bytes with its NUL).
SOCKET_PATH_MAX = 107
CNI_CONFLIST = "10-pytorchjob-kit.conflist"


@dataclass(frozen=True)
class Folders:
    """Where the node keeps its state: all of it under the cluster's folder (0700), so `cluster
    down --purge` removes it with the rest and nobody else on the machine reads it."""
    root: Path

    @classmethod
    def of(cls, layout: Layout, index: int = 0) -> Folders:
        return cls(layout.root / folder_name(index))

    @classmethod
    def every(cls, layout: Layout) -> list[Folders]:
        """Every node folder the cluster's holds (found, not counted: a killed run's count is not known);
        never one reached through a link, which no cluster makes."""
        found = [layout.root / folder_name(i) for i in range(netns.MAX_NODES)]
        return [cls(p) for p in found if p.is_dir() and not p.is_symlink()]

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.containerd / "config.toml"

    @property
    def registry_hosts(self) -> Path:
        """containerd's `config_path`: one folder per registry name (`host_port_` for host:port)."""
        return self.root / "certs.d"

    @property
    def registry_client(self) -> Path:
        """The node's copy of the read-only registry's CA and client certificate (0600 each): the
        hosts files name them here, in the cluster's folder, never in the registry's."""
        return self.root / "registry-client"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_bin(self) -> Path:
        """The CNI plugins containerd runs: launchers of the machine's, in the node's network namespace."""
        return self.root / "cni" / "bin"

    @property
    def ipam(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet(self) -> Path:
        """The kubelet's --root-dir: pods' volumes, plugins, checkpoints."""
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    def sockets(self) -> list[Path]:
        return [self.socket, Path(f"{self.socket}.ttrpc"), self.containerd / "debug.sock"]


@dataclass(frozen=True)
class NodePorts:
    kubelet: int
    healthz: int
    dns_ready: int  # CoreDNS's `ready` plugin, on loopback


@dataclass(frozen=True)
class Mirror:
    """The registry on this machine as the node's containerd pulls from it: the read-only one's
    address, and the registry names it holds images under (the first part of each of its
    repositories: ghcr.io, docker.io, ...), each of which containerd sends there first."""
    address: str  # 127.0.0.1:PORT, mutual TLS, read-only
    names: tuple[str, ...]


@dataclass(frozen=True)
class RealNode:
    """Everything the node's configuration depends on, chosen before containerd starts."""
    control_plane: components.ControlPlane
    ports: NodePorts
    runc: Path
    cni_bin: Path
    mirror: Mirror | None = None
    # What the kubelet keeps from the pods, so that the node's allocatable is `cluster up --cpu/--memory`.
    reserved: tuple[tuple[str, str], ...] = ()
    index: int = 0  # which of the cluster's nodes

    @property
    def layout(self) -> Layout:
        return self.control_plane.layout

    @property
    def folders(self) -> Folders:
        return Folders.of(self.layout, self.index)

    @property
    def name(self) -> str:
        return self.control_plane.node_names[self.index]

    @property
    def address(self) -> str:
        return self.control_plane.address

    @property
    def network(self) -> NodeNetwork:
        return NodeNetwork(self.control_plane.bridge, self.control_plane.pod_cidr, self.index,
                           len(self.control_plane.node_names))

    @property
    def cgroup_root(self) -> str:
        """The node's cgroup, inside the cluster's own in every hierarchy: `cluster node kill` kills
        the node's whole, `cluster down` the cluster's."""
        return f"{cgroups.cluster_name(self.layout.root)}/{folder_name(self.index)}"

    @property
    def serving_stem(self) -> str:
        return f"kubelet-serving-{self.name}"

    @property
    def client_stem(self) -> str:
        """The kubelet's client certificate: the certificates step issues it for the node's name."""
        return f"kubelet-{self.name}"


# In the environment of each of a node's processes (containerd's shims inherit it): `cluster node kill`
# finds them all by it, and nothing of another node.
NODE_MARKER = "PYTORCHJOB_KIT_NODE"


def marker(node: RealNode) -> dict[str, str]:
    return {NODE_MARKER: str(node.folders.root)}


def check_sockets(folders: Folders) -> None:
    """containerd's sockets live in the cluster's folder; a deep folder cannot hold one."""
    longest = max(folders.sockets(), key=lambda p: len(str(p)))
    if len(str(longest)) > SOCKET_PATH_MAX:
        raise ValueError(f"the node's socket {longest} is {len(str(longest))} characters, over the "
                         f"{SOCKET_PATH_MAX} a unix socket's path may have; give `cluster up --dir` a shorter folder")


def serving_certificate(node: RealNode) -> components.Certificate:
    """The kubelet's serving certificate, for the node's InternalIP the API server dials (pods/log, exec)."""
    return components.Certificate(node.serving_stem, components.NODE_USER.format(node.name), org=components.NODE_GROUP,
                                  server=True, ips=(node.address,))


def cni_conflist(node: RealNode) -> str:
    """The pods' network, inside the node's namespace: veths on its own bridge, which is their
    gateway, addresses from the upper half of the cluster's /24 (the host routes that half to the
    node). No masquerade: the API server reaches webhooks at the pods' own IPs, and pods see each
    other's. Hairpin, so a pod reaches itself through its Service."""
    net = node.network
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": node.control_plane.bridge,
        "plugins": [{
            "type": "bridge", "bridge": netns.POD_BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
            "ipam": {"type": "host-local", "dataDir": str(node.folders.ipam),
                     "ranges": [[{"subnet": net.pod_cidr, "gateway": net.pod_gateway}]],
                     "routes": [{"dst": "0.0.0.0/0", "gw": net.pod_gateway}]},
        }],
    }, indent=2) + "\n"


def cni_launchers(node: RealNode) -> dict[Path, str]:
    """One script per CNI plugin, where containerd looks for plugins: each runs the machine's plugin
    in the node's network namespace, so the bridge and the host ends of the pods' veths are made
    there (a plugin works in the namespace it is started in; containerd runs on the host)."""
    return {node.folders.cni_bin / plugin: "#!/bin/sh\nexec " + " ".join(
        node.network.enter([str(node.cni_bin / plugin)])) + ' "$@"\n' for plugin in packaged.CNI_PLUGINS}


def kubelet_config(node: RealNode) -> str:
    cp = node.control_plane
    f = node.folders
    serving_cert, serving_key = pki.files(cp.layout.pki, node.serving_stem)
    socket = f"unix://{f.socket}"
    return yaml.safe_dump({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": socket, "imageServiceEndpoint": socket,
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{node.cgroup_root}",
        # This machine's kind has hybrid cgroups (v1 controllers, v2 beside them): deprecated upstream, still run.
        "failCgroupV1": False, "failSwapOn": False,
        # The host's firewall left alone: kube-proxy writes its rules in the node's namespace.
        "makeIPTablesUtilChains": False,
        # true: the kubelet refuses to start unless vm.overcommit_memory, kernel.panic and kernel.panic_on_oops
        # have its values; false: it sets them machine-wide, and node.py puts them back at `cluster down`.
        "protectKernelDefaults": False,
        "address": node.address, "port": node.ports.kubelet, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": node.ports.healthz,
        "tlsCertFile": str(serving_cert), "tlsPrivateKeyFile": str(serving_key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(cp.ca)}},
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(f.pod_logs),
        "volumePluginDir": str(f.kubelet / "volume-plugins"),
        # Every pod's nameserver: the cluster's CoreDNS on its bridge address (realnode/dns.py).
        "clusterDNS": [node.address], "clusterDomain": dns.DOMAIN, "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        # Imported images cannot be pulled again: never collected.
        "imageGCHighThresholdPercent": 100,
        # A disk shared with others is never this node's reason to evict.
        "evictionHard": {"memory.available": support.EVICTION_MEMORY, "nodefs.available": "1%", "imagefs.available": "1%"},
        **({"systemReserved": dict(node.reserved)} if node.reserved else {}),
        **lease(node.control_plane.node.grace),
        "registerNode": True,
    }, sort_keys=False)


def lease(grace: int | None) -> dict:
    """The node's heartbeat for a shortened grace period: the kubelet renews its Lease every quarter
    of its duration, so a grace of G seconds sees about four renewals before it runs out (Kubernetes'
    own 40 s lease renews every 10 s, too seldom for a grace under 20 s)."""
    return {"nodeLeaseDurationSeconds": max(4, grace * 4 // 5)} if grace else {}


def containerd(node: RealNode) -> components.Component:
    return components.Component("containerd", [str(build.binary("containerd")), "--config", str(node.folders.containerd_config)],
                                # The shim is found next to containerd, on PATH.
                                env={"PATH": f"{build.binary('containerd').parent}:/usr/sbin:/usr/bin:/sbin:/bin",
                                     **marker(node)},
                                files={node.folders.containerd_config: containerd_config(node),
                                       node.folders.cni_conf / CNI_CONFLIST: cni_conflist(node),
                                       **registry_hosts(node)})


def kubelet(node: RealNode) -> components.Component:
    cp = node.control_plane
    kubeconfig = cp.layout.component_kubeconfig(f"kubelet-{node.name}")  # each node its own identity
    f = node.folders
    return components.Component("kubelet", [
        str(build.binary(pins.KUBELET)), f"--config={f.kubelet_config}", f"--kubeconfig={kubeconfig}",
        f"--root-dir={f.kubelet}", f"--cert-dir={f.kubelet / 'pki'}", f"--hostname-override={node.name}",
        f"--node-ip={node.address}", f"--node-labels={NODE_LABEL}={NODE_LABEL_VALUE}",
    ], env=marker(node), files={f.kubelet_config: kubelet_config(node),
              kubeconfig: components.kubeconfig(cp.server, cp.ca, *cp.cert(node.client_stem))})


def ctr(folders: Folders, *args: str) -> list[str]:
    """ctr against the node's containerd, in the namespace the CRI (and so the kubelet) uses."""
    return [str(build.binary("ctr")), "--address", str(folders.socket), "--namespace", "k8s.io", *args]
