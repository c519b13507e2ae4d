"""The Node the process kubelet posts reports the Kubernetes release of the control plane it
joins: the one go.mod pins, stated there alone."""
from __future__ import annotations

import re
from pathlib import Path

from generator.controlplane import build
from generator.controlplane.kubelet import node

GO_MOD = Path(build.__file__).parent / "go" / "go.mod"


def test_the_node_reports_the_release_go_mod_pins():
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\d+\.\d+\.\d+)", GO_MOD.read_text(), re.M).group(1)
    info = node.status("box", "10.244.7.1", 10250, node.capacity("2", "1Gi", 0), "2026-01-01T00:00:00Z")["nodeInfo"]
    assert info["kubeletVersion"] == pinned
    assert f"-X k8s.io/component-base/version.gitVersion={pinned}" in build._ldflags()  # what the API server reports


def test_no_release_is_written_in_the_kubelet_beside_go_mod():
    for source in Path(node.__file__).parent.glob("*.py"):
        assert not re.search(r"\bv1\.\d+\.\d+\b", source.read_text()), f"{source} states a Kubernetes release; read build.kube_version()"
