"""The real node's cluster DNS: CoreDNS with its kubernetes plugin, one per cluster, answering on
the host's bridge address of the cluster, which the kubelet gives every pod as its nameserver. On
a cluster CoreDNS runs as pods behind the kube-dns Service; here it is a child of the supervisor
like the kubelet, answering before the first pod starts and needing no image of its own, with a
client certificate and the read-only rights upstream's `system:coredns` ClusterRole gives.
Pure functions of the node's description; node.py starts it."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from generator.controlplane import components

if TYPE_CHECKING:
    from generator.controlplane.realnode.config import RealNode

DOMAIN = "cluster.local"
USER = "pytorchjob-kit:coredns"
STEM = "coredns"  # its client certificate's files in the cluster's pki folder
ROLE = "pytorchjob-kit:coredns"
COREFILE = "Corefile"
PORT = 53
# What the kubernetes plugin lists and watches, as upstream's system:coredns ClusterRole grants it.
RULES = [
    {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
]


def certificate() -> components.Certificate:
    return components.Certificate(STEM, USER)


def rbac() -> list[dict]:
    """The ClusterRole and its binding to the certificate's user, applied before CoreDNS starts."""
    meta = {"name": ROLE, "labels": {"app.kubernetes.io/managed-by": "pytorchjob-kit"}}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta, "rules": RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]},
    ]


def folder(node: RealNode) -> Path:
    return node.folders.root / "dns"


def corefile(node: RealNode) -> str:
    """Services and pods of the cluster's domain from its API server (headless Services answer with
    their pods' addresses: `<job>-master-0`, `<job>-node-0-0.<job>`), everything else forwarded to
    the machine's resolvers. `ready` answers on loopback once the API's objects are listed."""
    kubeconfig = folder(node) / "kubeconfig"
    return "\n".join([
        f".:{PORT} {{",
        f"    bind {node.address}",
        "    errors",
        f"    ready 127.0.0.1:{node.ports.dns_ready}",
        f"    kubernetes {DOMAIN} in-addr.arpa ip6.arpa {{",
        f"        kubeconfig {kubeconfig}",
        "        pods insecure",
        "        fallthrough in-addr.arpa ip6.arpa",
        "    }",
        "    forward . /etc/resolv.conf",
        "    cache 30",
        "    loop",
        "}",
        "",
    ])


def component(node: RealNode, binary: Path) -> components.Component:
    cp = node.control_plane
    here = folder(node)
    return components.Component("coredns", [str(binary), "-conf", str(here / COREFILE)], files={
        here / COREFILE: corefile(node),
        here / "kubeconfig": components.kubeconfig(cp.server, cp.ca, *cp.cert(STEM)),
    })


def ready_url(node: RealNode) -> str:
    return f"http://127.0.0.1:{node.ports.dns_ready}/ready"
