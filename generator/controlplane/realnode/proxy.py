"""kube-proxy for the real node: Services' ClusterIPs (the `kubernetes` Service's among them) as
iptables rules, written in the node's own network namespace (realnode/netns.py), where the
pods' packets are routed, so nothing of the machine's firewall changes. It authenticates as
`system:kube-proxy`, the user the API server's own `system:node-proxier` binding names. Pure
functions of the node's description; node.py starts it and waits for its first sync."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from generator.controlplane import components
from generator.controlplane.realnode import config

if TYPE_CHECKING:
    from generator.controlplane.realnode.config import RealNode

USER = "system:kube-proxy"
STEM = "kube-proxy"  # its client certificate's files in the cluster's pki folder
# Its ports are inside the node's namespace: every cluster has its own, so upstream's defaults serve.
HEALTHZ = "127.0.0.1:10256"
METRICS = "127.0.0.1:10249"
# The rule's comment kube-proxy writes for the `kubernetes` Service: present once it has synced.
API_SERVICE_MARK = "default/kubernetes:https"


def certificate() -> components.Certificate:
    return components.Certificate(STEM, USER)


def folder(node: RealNode) -> Path:
    return node.folders.root / "kube-proxy"


def configuration(node: RealNode) -> str:
    """iptables mode; the machine-wide conntrack settings (nf_conntrack_max and the TCP timeouts)
    left as they are (0: kube-proxy does not set them); local traffic told by the pods' CIDR."""
    return yaml.safe_dump({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(folder(node) / "kubeconfig")},
        "hostnameOverride": node.name,
        "mode": "iptables",
        "clusterCIDR": node.network.pods_cidr, "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": HEALTHZ, "metricsBindAddress": METRICS,
        # route_localnet stays off: no NodePort answers on the node's loopback.
        "iptables": {"localhostNodePorts": False},
        "nodePortAddresses": [f"{node.network.pod_gateway}/32"],
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }, sort_keys=False)


def component(node: RealNode, binary: Path) -> components.Component:
    cp = node.control_plane
    here = folder(node)
    return components.Component("kube-proxy", node.network.enter([str(binary), f"--config={here / 'config.yaml'}"]),
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **config.marker(node)}, files={
        here / "config.yaml": configuration(node),
        here / "kubeconfig": components.kubeconfig(cp.server, cp.ca, *cp.cert(STEM)),
    })


def synced(node: RealNode) -> bool:
    """Whether the `kubernetes` Service's rule is in the node's nat table."""
    listed = subprocess.run(node.network.enter(["iptables", "-w", "5", "-t", "nat", "-S"]), capture_output=True,
                            text=True, timeout=30)
    return listed.returncode == 0 and API_SERVICE_MARK in listed.stdout
