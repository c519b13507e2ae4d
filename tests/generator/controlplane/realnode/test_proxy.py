"""kube-proxy's configuration and argv on the real node, read as a user debugging Services would
read them in the cluster's folder: in the node's own network namespace, with the pods' CIDR,
leaving the machine's conntrack settings alone, as the API server's own kube-proxy user."""
from __future__ import annotations

from pathlib import Path

import yaml

from generator.controlplane import build, pins
from generator.controlplane.realnode import proxy
from tests.generator.controlplane.realnode.test_config import real_node


def test_kube_proxy_runs_in_the_nodes_namespace_with_its_config(tmp_path):
    node = real_node(tmp_path / "c")
    started = proxy.component(node, Path("/cache/kube-proxy"))
    here = node.layout.root / "node" / "kube-proxy"
    assert started.argv == ["/usr/bin/nsenter", "--net=/run/netns/pjk0000-node", "--", "/cache/kube-proxy",
                            f"--config={here / 'config.yaml'}"]
    assert set(started.files) == {here / "config.yaml", here / "kubeconfig"}
    kubeconfig = yaml.safe_load(started.files[here / "kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://10.244.7.1:6443"
    assert kubeconfig["users"][0]["user"]["client-certificate"] == str(node.layout.pki / "kube-proxy.crt")
    # The API server's bootstrap binding system:node-proxier names this user: no RBAC of ours.
    assert (proxy.certificate().stem, proxy.certificate().cn) == ("kube-proxy", "system:kube-proxy")
    assert build.binary(pins.KUBE_PROXY).name == "kube-proxy"


def test_kube_proxy_writes_iptables_rules_for_the_pods_cidr_and_leaves_conntrack_alone(tmp_path):
    node = real_node(tmp_path / "c")
    got = yaml.safe_load(proxy.configuration(node))
    assert (got["apiVersion"], got["kind"], got["mode"]) == ("kubeproxy.config.k8s.io/v1alpha1",
                                                              "KubeProxyConfiguration", "iptables")
    assert (got["hostnameOverride"], got["clusterCIDR"], got["detectLocalMode"]) == ("box", "10.244.7.128/25",
                                                                                      "ClusterCIDR")
    # 0 for each: kube-proxy would otherwise set nf_conntrack_max and the TCP timeouts, which are machine-wide.
    assert got["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    assert got["iptables"] == {"localhostNodePorts": False}
    assert got["clientConnection"]["kubeconfig"] == str(node.layout.root / "node" / "kube-proxy" / "kubeconfig")
