"""The real node's cluster DNS as configured, without starting it: where CoreDNS answers, what it
may read from the API server, and that every pod is given it as its nameserver."""
from __future__ import annotations

import pytest
import yaml

from generator.controlplane import build, pins, pki
from generator.controlplane.realnode import config, dns
from tests.generator.controlplane.realnode.test_config import real_node


@pytest.fixture
def node(tmp_path) -> config.RealNode:
    return real_node(tmp_path / "c")


def test_pods_are_given_the_clusters_coredns_on_its_bridge_address_as_their_nameserver(node):
    kubelet = yaml.safe_load(config.kubelet_config(node))
    assert kubelet["clusterDNS"] == ["10.244.7.1"] and kubelet["clusterDomain"] == "cluster.local"
    corefile = dns.corefile(node)
    # Only on the cluster's own bridge address: a second cluster's CoreDNS binds its own.
    assert "    bind 10.244.7.1\n" in corefile and corefile.startswith(".:53 {")
    assert "    ready 127.0.0.1:8181\n" in corefile and dns.ready_url(node) == "http://127.0.0.1:8181/ready"
    assert "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n" in corefile
    assert "    forward . /etc/resolv.conf\n" in corefile


def test_coredns_reads_the_api_with_a_certificate_of_its_own_kept_in_the_clusters_folder(node):
    component = dns.component(node, build.binary(pins.COREDNS))
    here = node.layout.root / "node" / "dns"
    assert component.name == "coredns"
    assert component.argv == [str(build.binary(pins.COREDNS)), "-conf", str(here / "Corefile")]
    assert f"        kubeconfig {here / 'kubeconfig'}\n" in component.files[here / "Corefile"]
    kubeconfig = yaml.safe_load(component.files[here / "kubeconfig"])
    cert, key = pki.files(node.layout.pki, dns.STEM)
    assert kubeconfig["users"][0]["user"] == {"client-certificate": str(cert), "client-key": str(key)}
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://10.244.7.1:6443"
    assert (dns.certificate().cn, dns.certificate().org) == ("pytorchjob-kit:coredns", None)


def test_coredns_may_only_list_and_watch_what_its_kubernetes_plugin_reads():
    role, binding = dns.rbac()
    assert role["kind"] == "ClusterRole" and binding["kind"] == "ClusterRoleBinding"
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"list", "watch"}
    resources = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert resources == {("", "endpoints"), ("", "services"), ("", "pods"), ("", "namespaces"),
                         ("discovery.k8s.io", "endpointslices")}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": dns.certificate().cn}]


def test_corednss_build_links_each_plugin_its_corefile_names(node):
    """A directive whose plugin main.go leaves out stops CoreDNS at start ("Unknown directive")."""
    main = (pins.COREDNS_MODULE_DIR / "main.go").read_text()
    linked = {line.split('"')[1].rsplit("/", 1)[1] for line in main.splitlines() if "coredns/plugin/" in line}
    directives = {line.split()[0] for line in dns.corefile(node).splitlines()[1:]
                  if line.startswith("    ") and not line.startswith("        ") and line.split()[0] != "}"}
    assert directives <= linked, f"main.go lacks {directives - linked}"
