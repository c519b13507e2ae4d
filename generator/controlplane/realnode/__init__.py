"""The local cluster's node: the kubelet of the control plane's Kubernetes release, containerd v2
and runc run the pods from images, in the cluster's own cgroup, on the cluster's bridge. Built as
groups of the control plane's build table (controlplane/build.py; the sandbox image by pause.py),
with runc and the CNI plugins from Debian's packages (packaged.py); configured by pure functions
(config.py); started as one bring-up step (node.py); undone at `cluster down` (host.py). Whether
this machine can run it, and what to change where it cannot, is support.py's."""
from __future__ import annotations

import socket

# On the node's Node object: `diagnose` tells a pull from the registry on this machine, where
# `image load` is the fix, from a pull on any other cluster.
NODE_LABEL = "pytorchjob-kit/node"
NODE_LABEL_VALUE = "real"


def node_name() -> str:
    """This machine's hostname as a Node name (DNS-1123, lower case)."""
    raw = socket.gethostname().lower()
    name = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in raw).strip("-.")
    return name[:63] or "localhost"


def node_names(first: str, count: int) -> tuple[str, ...]:
    """The cluster's nodes: the first under `first`, the others after it as `FIRST-node2`, ... (stable
    across restarts, as kind names its workers)."""
    return (first, *(f"{first[:56].rstrip('-.')}-node{i + 1}" for i in range(1, count)))


def folder_name(index: int) -> str:
    """The node's folder in the cluster's: `node` for the first, `node2`, ... for the others."""
    return "node" + (f"{index + 1}" if index else "")
