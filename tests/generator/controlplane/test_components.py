"""What each component of the local control plane is started with, built from one configuration
without starting anything: the flags a user debugging the cluster would look for."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from generator.controlplane import build, components, pki
from generator.controlplane.layout import Layout
from generator.controlplane.state import NodeOptions

PORTS = components.Ports(etcd=2379, etcd_peer=2380, apiserver=6443, controller_manager=10257, scheduler=10259)


@pytest.fixture
def cfg(tmp_path) -> components.ControlPlane:
    return components.ControlPlane(Layout(tmp_path / "c"), "10.244.7.1", "pjk0000", "10.244.7.0/24", PORTS, "box",
                                   NodeOptions(cpu="4", memory="8Gi", gpus=1, images={"my/op": "ghcr.io/x/op"}))


def flags(component: components.Component) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in component.argv[1:] if arg.startswith("--") and "=" in arg)


def test_etcd_listens_on_loopback_only_with_mutual_tls_and_its_data_in_the_cluster_folder(cfg):
    etcd = components.etcd(cfg)
    pki = cfg.layout.pki
    assert etcd.argv[0] == str(build.binary("etcd"))
    assert flags(etcd) == {"data-dir": str(cfg.layout.root / "etcd"), "listen-client-url": "https://127.0.0.1:2379",
                           "listen-peer-url": "https://127.0.0.1:2380", "cert-file": str(pki / "etcd-server.crt"),
                           "key-file": str(pki / "etcd-server.key"), "trusted-ca-file": str(pki / "ca.crt")}


def test_only_the_api_server_holds_a_client_certificate_for_etcd(cfg):
    got = flags(components.kube_apiserver(cfg))
    pki = cfg.layout.pki
    assert (got["etcd-cafile"], got["etcd-certfile"], got["etcd-keyfile"]) == (
        str(pki / "ca.crt"), str(pki / "apiserver-etcd-client.crt"), str(pki / "apiserver-etcd-client.key"))
    issued = {c.stem: c for c in components.certificates(cfg)}
    assert issued["etcd-server"].server and issued["etcd-server"].also_client and issued["etcd-server"].ips == ("127.0.0.1",)
    assert not issued["apiserver-etcd-client"].server
    # No other component's argv or kubeconfig names the etcd client's key.
    others = [components.etcd(cfg), components.kube_controller_manager(cfg), components.kube_scheduler(cfg)]
    assert not any("apiserver-etcd-client" in " ".join([*c.argv, *c.files.values()]) for c in others)


def test_the_api_server_serves_on_the_bridge_with_the_clusters_certificates(cfg):
    pki = cfg.layout.pki
    got = flags(components.kube_apiserver(cfg))
    assert got["etcd-servers"] == "https://127.0.0.1:2379"
    assert (got["bind-address"], got["advertise-address"], got["secure-port"]) == ("10.244.7.1", "10.244.7.1", "6443")
    assert got["tls-cert-file"] == str(pki / "apiserver-10.244.7.1.crt")
    assert got["tls-private-key-file"] == str(pki / "apiserver-10.244.7.1.key")
    assert got["client-ca-file"] == got["kubelet-certificate-authority"] == str(pki / "ca.crt")
    assert got["service-account-key-file"] == str(pki / "sa.pub")
    assert got["service-account-signing-key-file"] == str(pki / "sa.key")
    assert got["kubelet-client-certificate"] == str(pki / "apiserver-kubelet-client.crt")
    assert got["authorization-mode"] == "Node,RBAC"
    # Webhooks are reached at their pods' IPs: there is no kube-proxy.
    assert got["enable-aggregator-routing"] == "true" and got["kubelet-preferred-address-types"] == "InternalIP"
    assert got["service-cluster-ip-range"] == "10.96.0.0/16"
    assert cfg.server == "https://10.244.7.1:6443"


@pytest.mark.parametrize(("build_it", "name", "port"), [(components.kube_controller_manager, "kube-controller-manager", "10257"),
                                                        (components.kube_scheduler, "kube-scheduler", "10259")])
def test_controllers_authenticate_with_a_kubeconfig_of_their_own(cfg, build_it, name, port):
    component = build_it(cfg)
    got = flags(component)
    path = cfg.layout.root / "kubeconfigs" / f"{name}.yaml"
    assert got["kubeconfig"] == got["authentication-kubeconfig"] == got["authorization-kubeconfig"] == str(path)
    assert (got["bind-address"], got["secure-port"], got["leader-elect"]) == ("127.0.0.1", port, "false")
    kubeconfig = yaml.safe_load(component.files[path])
    assert kubeconfig["clusters"][0]["cluster"] == {"server": "https://10.244.7.1:6443",
                                                    "certificate-authority": str(cfg.layout.pki / "ca.crt")}
    assert kubeconfig["users"][0]["user"]["client-certificate"] == str(cfg.layout.pki / f"{name}.crt")


def test_the_controller_manager_signs_tokens_with_the_service_account_key(cfg):
    got = flags(components.kube_controller_manager(cfg))
    assert got["service-account-private-key-file"] == str(cfg.layout.pki / "sa.key")
    assert got["use-service-account-credentials"] == "true"
    assert "node-monitor-grace-period" not in got  # Kubernetes' own 50 s


def test_a_rehearsals_grace_period_reaches_the_node_lifecycle_controller(cfg):
    import dataclasses

    short = dataclasses.replace(cfg, node=dataclasses.replace(cfg.node, grace=12))
    assert flags(components.kube_controller_manager(short))["node-monitor-grace-period"] == "12s"


def test_every_certificate_a_component_names_is_one_the_certificates_step_issues(cfg):
    issued = {path for cert in components.certificates(cfg) for path in cfg.cert(cert.stem)}
    issued |= set(pki.files(cfg.front_proxy, components.FRONT_PROXY_CLIENT))  # from the aggregation layer's own CA
    named = set()
    for build_it in (components.kube_apiserver, components.kube_controller_manager, components.kube_scheduler):
        component = build_it(cfg)
        named |= {Path(v) for v in flags(component).values() if v.endswith((".crt", ".key")) and "/sa." not in v}
        for text in component.files.values():
            if "users" not in yaml.safe_load(text):  # not a kubeconfig: the API server's admission config
                continue
            user = yaml.safe_load(text)["users"][0]["user"]
            named |= {Path(user["client-certificate"]), Path(user["client-key"])}
    named -= {cfg.ca, pki.files(cfg.front_proxy, "ca")[0]}
    assert named and named <= issued
    # The node is known to the Node authorizer by its name and group.
    node = next(c for c in components.certificates(cfg) if c.stem == "kubelet-box")
    assert (node.cn, node.org) == ("system:node:box", "system:nodes")
    serving = next(c for c in components.certificates(cfg) if c.server)
    assert "10.244.7.1" in serving.ips


def test_the_api_server_serves_aggregated_apis_only_through_its_own_front_proxy_certificate(cfg):
    got = flags(components.kube_apiserver(cfg))
    front = cfg.layout.pki / "front-proxy"
    assert got["requestheader-client-ca-file"] == str(front / "ca.crt")
    assert got["requestheader-allowed-names"] == "front-proxy-client"
    assert (got["proxy-client-cert-file"], got["proxy-client-key-file"]) == (
        str(front / "front-proxy-client.crt"), str(front / "front-proxy-client.key"))
    assert got["client-ca-file"] != got["requestheader-client-ca-file"]  # no cluster certificate can pass a user


@pytest.mark.parametrize("level", ["baseline", "restricted", "privileged"])
def test_the_api_server_authenticates_everyone_restricts_nodes_and_enforces_the_pod_security_level(cfg, level):
    from dataclasses import replace

    component = components.kube_apiserver(replace(cfg, node=replace(cfg.node, pod_security=level)))
    args = flags(component)
    assert args["anonymous-auth"] == "false" and args["enable-admission-plugins"] == "NodeRestriction"
    config = yaml.safe_load(component.files[Path(args["admission-control-config-file"])])
    (plugin,) = config["plugins"]
    assert plugin["name"] == "PodSecurity"
    assert plugin["configuration"]["defaults"] == {"enforce": level, "enforce-version": "latest"}
