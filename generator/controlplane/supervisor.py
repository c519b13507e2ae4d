"""The process that owns a local cluster: it makes the pod network (a bridge), starts etcd on
loopback, kube-apiserver on the bridge's address, kube-controller-manager and kube-scheduler,
the process kubelet as the one node,
a default StorageClass with its provisioner, installs charts/pytorch-operator (whose pod the
kubelet then runs), and stops everything on SIGTERM. `generator cluster up` starts it in the
background.

    python -m generator.controlplane.supervisor DIR [-f operator-values.yaml] [--cpu C] [--memory M] [--gpus N]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys
import threading
import traceback
import urllib.request
from pathlib import Path

import yaml

from generator.controlplane import build, kubelet, network, operator, pki, processes, storage
from generator.controlplane.layout import Layout

SERVICE_RANGE = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
STOP_ORDER = ["kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "pytorchjob-kit", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "pytorchjob-kit", "context": {"cluster": "pytorchjob-kit", "user": "user",
                                                            "namespace": "default"}}],
        "current-context": "pytorchjob-kit",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


class Supervisor:
    def __init__(self, layout: Layout, operator_values: dict | None, node: dict):
        self.layout = layout
        self.operator_values = operator_values
        self.node = node  # cpu, memory, gpus for the kubelet
        self.children: dict[str, processes.Child] = {}
        self.stopping = threading.Event()
        self.state: dict = {"phase": "starting", "pid": None, "processes": {}, "error": None}
        self.network: network.PodNetwork | None = None

    # --- state -------------------------------------------------------------------------------
    def _save(self, **changes) -> None:
        self.state.update(changes)
        self.state["processes"] = {n: {"pid": c.pid, "log": str(c.log)} for n, c in self.children.items()}
        self.layout.write_state(self.state)

    def _start(self, name: str, argv: list[str], env: dict | None = None) -> processes.Child:
        child = processes.start(name, argv, self.layout.logs, env)
        self.children[name] = child
        self._save()
        return child

    # --- the control plane -------------------------------------------------------------------
    def run(self) -> int:
        self.state["pid"] = os.getpid()
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._save()
        try:
            self._bring_up()
        except Exception as exc:  # up reports it; down finds nothing left running
            self._save(phase="failed", error=_short(exc))
            traceback.print_exc()
            self.stop()
            return 1
        self._save(phase="ready")
        print("cluster ready", flush=True)
        while not self.stopping.wait(1.0):
            dead = [n for n, c in self.children.items() if not c.alive()]
            if dead and self.state.get("phase") == "ready":
                self._save(phase="degraded", error=", ".join(
                    f"{n} exited with {self.children[n].proc.returncode} (log {self.children[n].log})" for n in dead))
        self.stop()
        return 0

    def _bring_up(self) -> None:
        with network.choosing():
            self.network = network.PodNetwork.for_cluster(self.layout.root)
            self._save(pod_network=self.network.as_dict())
            self.network.create()
        address = self.network.gateway  # pods reach the API server here, and the host does too
        ca = pki.Authority(self.layout.pki)
        serving = ca.issue(f"apiserver-{address}", "kube-apiserver", server=True, ips=[*pki.API_IPS, address])
        sa_private, sa_public = pki.service_account_key(self.layout.pki)
        admin = ca.issue("admin", "pytorchjob-kit-admin", org="system:masters")
        kubelet_client = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", org="system:masters")
        node_name = kubelet.node_name()
        # The Node authorizer and NodeRestriction know a kubelet by this name and group.
        node_cert = ca.issue(f"kubelet-{node_name}", f"system:node:{node_name}", org="system:nodes")

        etcd_port, api_port = network.free_port(), network.free_port()
        etcd = self._start("etcd", [str(build.binary("etcd")), f"--data-dir={self.layout.etcd_data}",
                                    f"--listen-client-url=http://127.0.0.1:{etcd_port}",
                                    f"--listen-peer-url=http://127.0.0.1:{network.free_port()}"])
        processes.wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{etcd_port}/health", timeout=2).status == 200,
                             60, "etcd to be healthy", etcd)

        server = f"https://{address}:{api_port}"
        apiserver = self._start("kube-apiserver", [
            str(build.binary("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={address}", f"--secure-port={api_port}", f"--advertise-address={address}",
            f"--tls-cert-file={serving[0]}", f"--tls-private-key-file={serving[1]}",
            f"--client-ca-file={ca.cert_path}",
            f"--service-account-issuer={ISSUER}", f"--service-account-key-file={sa_public}",
            f"--service-account-signing-key-file={sa_private}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--authorization-mode=Node,RBAC",
            # No kube-proxy here: the API server reaches webhooks at their endpoints, the pods' own IPs.
            "--enable-aggregator-routing=true",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            # pods/log reaches the kubelet at the Node's InternalIP, each side checking the other's certificate.
            f"--kubelet-client-certificate={kubelet_client[0]}", f"--kubelet-client-key={kubelet_client[1]}",
            f"--kubelet-certificate-authority={ca.cert_path}", "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
        ])
        self._save(server=server, kubeconfig=str(self.layout.kubeconfig))
        write_kubeconfig(self.layout.kubeconfig, server, ca.cert_path,
                         {"client-certificate": str(admin[0]), "client-key": str(admin[1])})
        context = ssl.create_default_context(cafile=str(ca.cert_path))
        context.load_cert_chain(str(admin[0]), str(admin[1]))
        processes.wait_until(lambda: urllib.request.urlopen(f"{server}/readyz", context=context, timeout=5).status == 200,
                             180, "kube-apiserver to be ready", apiserver)

        for name, user in (("kube-controller-manager", "system:kube-controller-manager"),
                           ("kube-scheduler", "system:kube-scheduler")):
            cert, key = ca.issue(name, user)
            write_kubeconfig(self.layout.component_kubeconfig(name), server, ca.cert_path,
                             {"client-certificate": str(cert), "client-key": str(key)})
        self._start("kube-controller-manager", [
            str(build.binary("kube-controller-manager")),
            f"--kubeconfig={self.layout.component_kubeconfig('kube-controller-manager')}",
            f"--authentication-kubeconfig={self.layout.component_kubeconfig('kube-controller-manager')}",
            f"--authorization-kubeconfig={self.layout.component_kubeconfig('kube-controller-manager')}",
            "--bind-address=127.0.0.1", f"--secure-port={network.free_port()}",
            f"--service-account-private-key-file={sa_private}", f"--root-ca-file={ca.cert_path}",
            "--use-service-account-credentials=true", f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--leader-elect=false",
        ])
        self._start("kube-scheduler", [
            str(build.binary("kube-scheduler")),
            f"--kubeconfig={self.layout.component_kubeconfig('kube-scheduler')}",
            f"--authentication-kubeconfig={self.layout.component_kubeconfig('kube-scheduler')}",
            f"--authorization-kubeconfig={self.layout.component_kubeconfig('kube-scheduler')}",
            "--bind-address=127.0.0.1", f"--secure-port={network.free_port()}", "--leader-elect=false",
        ])

        write_kubeconfig(self.layout.component_kubeconfig("kubelet"), server, ca.cert_path,
                         {"client-certificate": str(node_cert[0]), "client-key": str(node_cert[1])})
        node_args = [f"--{k}={v}" for k, v in self.node.items() if v and k != "image"]
        node_args += [f"--image={alias}" for alias in [*_operator_images(self.operator_values or {}),
                                                       *self.node.get("image", [])]]
        node = self._start("kubelet", [sys.executable, "-m", "generator.controlplane.kubelet", str(self.layout.root),
                                       f"--server={server}", f"--node-name={node_name}",
                                       f"--bridge={self.network.bridge}", f"--pod-cidr={self.network.cidr}", *node_args],
                           {**os.environ, "PYTHONUNBUFFERED": "1"})
        api = operator.admin_client(self.layout)
        from kubernetes import client

        core = client.CoreV1Api(api)
        processes.wait_until(lambda: _node_ready(core, node_name), 120, f"node {node_name} to be Ready", node)
        operator.apply(api, [storage.storage_class()], "default")
        storage.Provisioner(api, self.layout.root / "volumes", self.stopping).start()

        self._save(node=node_name, operator=None)
        if self.operator_values is None:  # `cluster up --no-operator`: the user installs it with helm
            return
        installed = operator.install(self.layout, self.operator_values)
        self._save(operator={"namespace": installed.namespace, "deployment": installed.deployment,
                             "service_account": installed.service_account, "release": installed.release})
        operator.wait_ready(self.layout, installed, node)

    def stop(self) -> None:
        self.stopping.set()
        for name in STOP_ORDER:
            child = self.children.get(name)
            if child is not None:
                child.stop(grace=30 if name == "kubelet" else 10)  # the kubelet first stops every pod
        if self.network is not None:
            self.network.delete()
        self._save(phase="stopped")


def _operator_images(values: dict) -> list[str]:
    """The operator chart's images as the kubelet should run them, whatever mirror the values name."""
    from generator.container import programs

    deployment = next(o for o in operator.render(values) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    aliases = [f"{programs.repository(container['image'])}={programs.of('operator').repository}"]
    for arg in container.get("args") or []:
        if arg.startswith("--pytorch-init-container-image="):
            aliases.append(f"{programs.repository(arg.split('=', 1)[1])}={programs.of('init').repository}")
    return aliases


def _node_ready(core, name: str) -> bool:
    conditions = core.read_node_status(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _short(exc: Exception) -> str:
    """One line for `cluster up` to print: an API refusal's own message, else the exception's."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return f"{exc.__class__.__name__}: {json.loads(body).get('message')}"
        except (ValueError, AttributeError):
            pass
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.controlplane.supervisor")
    parser.add_argument("dir", type=Path)
    parser.add_argument("-f", "--values", type=Path, help="values for charts/pytorch-operator")
    parser.add_argument("--no-operator", action="store_true", help="install no operator release")
    parser.add_argument("--cpu", help="the node's CPU capacity (default: this machine's)")
    parser.add_argument("--memory", help="the node's memory capacity (default: this machine's)")
    parser.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu the node offers, for scheduling")
    parser.add_argument("--image", action="append", default=[], metavar="REPO=KNOWN",
                        help="run REPO's images as the known image KNOWN; repeatable")
    args = parser.parse_args(argv)
    values = None if args.no_operator else (yaml.safe_load(args.values.read_text()) if args.values else None) or {}
    supervisor = Supervisor(Layout(args.dir.resolve()), values,
                            {"cpu": args.cpu, "memory": args.memory, "gpus": args.gpus, "image": args.image})
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: supervisor.stopping.set())
    code = supervisor.run()
    print(json.dumps({"phase": supervisor.state.get("phase")}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
