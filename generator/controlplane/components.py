"""Each component of the local control plane as a pure function of one typed configuration:
its argv, the environment it adds, and the files it reads (kubeconfigs). Nothing here starts a
process or writes a file; bringup.py does, in order. The certificates' paths are derived from
the cluster's folder (pki.files), so a builder names them before they exist."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from generator.controlplane import build, pki
from generator.controlplane.layout import Layout
from generator.controlplane.state import NodeOptions

SERVICE_RANGE = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
# The Node authorizer and NodeRestriction know a kubelet by this name and group.
NODE_USER, NODE_GROUP = "system:node:{}", "system:nodes"
# Components that talk to the API server with a client certificate and a kubeconfig of their own.
CLIENTS = {"kube-controller-manager": "system:kube-controller-manager", "kube-scheduler": "system:kube-scheduler"}


@dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


@dataclass(frozen=True)
class ControlPlane:
    """Everything the components' argv depend on, chosen before any of them starts."""
    layout: Layout
    address: str  # the bridge's address: the API server listens here; pods and the host reach it
    bridge: str
    pod_cidr: str
    ports: Ports
    node_name: str
    node: NodeOptions

    @property
    def node_names(self) -> tuple[str, ...]:
        """Every node's name, the first `node_name` (`cluster up --nodes`)."""
        from generator.controlplane.realnode import node_names

        return node_names(self.node_name, self.node.count)

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.ports.apiserver}"

    @property
    def etcd_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.etcd}"

    def cert(self, stem: str) -> tuple[Path, Path]:
        return pki.files(self.layout.pki, stem)

    @property
    def ca(self) -> Path:
        return pki.files(self.layout.pki, "ca")[0]

    @property
    def front_proxy(self) -> Path:
        """The aggregation layer's own CA's folder: extension API servers (Kueue's visibility API)
        trust the user the API server names in request headers only from a client it signed."""
        return self.layout.pki / "front-proxy"


@dataclass(frozen=True)
class Certificate:
    stem: str
    cn: str
    org: str | None = None
    server: bool = False
    ips: tuple[str, ...] = tuple(pki.API_IPS)
    also_client: bool = False


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the supervisor's environment
    files: dict[Path, str] = field(default_factory=dict)  # written (mode 0600) before it starts


def serving_stem(cfg: ControlPlane) -> str:
    return f"apiserver-{cfg.address}"


APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # the API server as the kubelet's client; nobody else
ETCD_SERVER, ETCD_CLIENT = "etcd-server", "apiserver-etcd-client"  # etcd answers the holder of the client's key alone
# The API server as the client of extension API servers, from a CA of its own (as kubeadm makes it): a
# certificate of the cluster's CA cannot pass a user's name in headers.
FRONT_PROXY_CA, FRONT_PROXY_CLIENT = "pytorchjob-kit-front-proxy-ca", "front-proxy-client"


def certificates(cfg: ControlPlane) -> list[Certificate]:
    """Every certificate the control plane's components present, with the identity it carries."""
    return [
        Certificate(serving_stem(cfg), "kube-apiserver", server=True, ips=(*pki.API_IPS, cfg.address)),
        Certificate("admin", "pytorchjob-kit-admin", org="system:masters"),
        Certificate("apiserver-kubelet-client", APISERVER_KUBELET_CLIENT, org="system:masters"),
        *(Certificate(f"kubelet-{name}", NODE_USER.format(name), org=NODE_GROUP) for name in cfg.node_names),
        *(Certificate(name, user) for name, user in CLIENTS.items()),
        Certificate(ETCD_SERVER, "etcd", server=True, ips=("127.0.0.1",), also_client=True),
        Certificate(ETCD_CLIENT, "kube-apiserver-etcd-client"),
    ]


def kubeconfig(server: str, ca: Path, cert: Path, key: Path) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "pytorchjob-kit", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "pytorchjob-kit", "context": {"cluster": "pytorchjob-kit", "user": "user",
                                                            "namespace": "default"}}],
        "current-context": "pytorchjob-kit",
    }, sort_keys=False)


def admin_kubeconfig(cfg: ControlPlane) -> dict[Path, str]:
    """The user's kubeconfig, which `cluster up` prints."""
    return {cfg.layout.kubeconfig: kubeconfig(cfg.server, cfg.ca, *cfg.cert("admin"))}


def _client_kubeconfig(cfg: ControlPlane, name: str, stem: str) -> tuple[Path, dict[Path, str]]:
    path = cfg.layout.component_kubeconfig(name)
    return path, {path: kubeconfig(cfg.server, cfg.ca, *cfg.cert(stem))}


def etcd(cfg: ControlPlane) -> Component:
    # Loopback and mutual TLS: any user of the machine reaches loopback, so etcd answers only a
    # client whose certificate the cluster's CA signed, and only the API server holds that key.
    cert, key = cfg.cert(ETCD_SERVER)
    return Component("etcd", [str(build.binary("etcd")), f"--data-dir={cfg.layout.etcd_data}",
                              f"--listen-client-url={cfg.etcd_url}",
                              f"--listen-peer-url=https://127.0.0.1:{cfg.ports.etcd_peer}",
                              f"--cert-file={cert}", f"--key-file={key}", f"--trusted-ca-file={cfg.ca}"])


def kube_apiserver(cfg: ControlPlane) -> Component:
    serving_cert, serving_key = cfg.cert(serving_stem(cfg))
    kubelet_cert, kubelet_key = cfg.cert("apiserver-kubelet-client")
    sa_private, sa_public = pki.service_account_files(cfg.layout.pki)
    etcd_cert, etcd_key = cfg.cert(ETCD_CLIENT)
    proxy_cert, proxy_key = pki.files(cfg.front_proxy, FRONT_PROXY_CLIENT)
    admission = cfg.layout.root / "admission.yaml"
    return Component("kube-apiserver", [
        str(build.binary("kube-apiserver")),
        f"--etcd-servers={cfg.etcd_url}", f"--etcd-cafile={cfg.ca}",
        f"--etcd-certfile={etcd_cert}", f"--etcd-keyfile={etcd_key}",
        f"--bind-address={cfg.address}", f"--secure-port={cfg.ports.apiserver}", f"--advertise-address={cfg.address}",
        f"--tls-cert-file={serving_cert}", f"--tls-private-key-file={serving_key}",
        f"--client-ca-file={cfg.ca}",
        f"--service-account-issuer={ISSUER}", f"--service-account-key-file={sa_public}",
        f"--service-account-signing-key-file={sa_private}",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--authorization-mode=Node,RBAC",
        # Every request names who sends it, and a node's credentials change only its own Node and pods.
        "--anonymous-auth=false", "--enable-admission-plugins=NodeRestriction",
        f"--admission-control-config-file={admission}",
        # No kube-proxy here: the API server reaches webhooks at their endpoints, the pods' own IPs.
        "--enable-aggregator-routing=true",
        # The aggregation layer, for APIs served by pods (Kueue's visibility.kueue.x-k8s.io).
        f"--requestheader-client-ca-file={pki.files(cfg.front_proxy, 'ca')[0]}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}", "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={proxy_cert}", f"--proxy-client-key-file={proxy_key}",
        # The `kubernetes` Service's EndpointSlice names this API server (its lease): the real node's
        # kube-proxy takes the Service's ClusterIP there.
        "--endpoint-reconciler-type=lease",
        "--allow-privileged=true",
        # pods/log reaches the kubelet at the Node's InternalIP, each side checking the other's certificate.
        f"--kubelet-client-certificate={kubelet_cert}", f"--kubelet-client-key={kubelet_key}",
        f"--kubelet-certificate-authority={cfg.ca}", "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ], files={admission: admission_config(cfg.node.pod_security)})


def admission_config(level: str) -> str:
    """PodSecurity's cluster-wide default: `level` enforced wherever a namespace sets no label of its
    own (`pod-security.kubernetes.io/enforce`), as a hardened cloud cluster does."""
    return yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": "PodSecurity", "configuration": {
            "apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
            "defaults": {"enforce": level, "enforce-version": "latest"},
            "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system"]}}}]}, sort_keys=False)


def _authenticated(path: Path) -> list[str]:
    return [f"--kubeconfig={path}", f"--authentication-kubeconfig={path}", f"--authorization-kubeconfig={path}"]


def kube_controller_manager(cfg: ControlPlane) -> Component:
    name = "kube-controller-manager"
    path, files = _client_kubeconfig(cfg, name, name)
    sa_private, _ = pki.service_account_files(cfg.layout.pki)
    return Component(name, [
        str(build.binary(name)), *_authenticated(path),
        "--bind-address=127.0.0.1", f"--secure-port={cfg.ports.controller_manager}",
        f"--service-account-private-key-file={sa_private}", f"--root-ca-file={cfg.ca}",
        "--use-service-account-credentials=true", f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--leader-elect=false",
        *([f"--node-monitor-grace-period={cfg.node.grace}s"] if cfg.node.grace else []),
    ], files=files)


def kube_scheduler(cfg: ControlPlane) -> Component:
    name = "kube-scheduler"
    path, files = _client_kubeconfig(cfg, name, name)
    return Component(name, [str(build.binary(name)), *_authenticated(path), "--bind-address=127.0.0.1",
                            f"--secure-port={cfg.ports.scheduler}", "--leader-elect=false"], files=files)


def helm_homes(folder: Path) -> dict[str, str]:
    """The helm CLI's config, caches and data in `folder`, the user's home left alone."""
    return {"HELM_CONFIG_HOME": str(folder / "config"), "HELM_CACHE_HOME": str(folder / "cache"),
            "HELM_DATA_HOME": str(folder / "data")}


def helm_env(layout: Layout) -> dict[str, str]:
    """The helm CLI against this cluster, its config and caches inside the cluster's folder."""
    return {"KUBECONFIG": str(layout.kubeconfig), **helm_homes(layout.root / "helm")}


def write_files(component: Component) -> None:
    for path, text in component.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)
