"""The end-to-end suite: a real control plane (`generator cluster up`), shared by the modules that
can share one, the real operator, the real webhook. Needs Go for the first build; `make e2e` runs it."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT


@dataclass
class LocalCluster:
    dir: Path
    kubeconfig: Path
    env: dict
    said: str = ""  # what `cluster up` printed on stderr

    def cli(self, *args: str, check: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
        """`python -m generator ...` against this cluster, as a user's shell would run it."""
        proc = subprocess.run([sys.executable, "-m", "generator", *args], env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"generator {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    def helm(self, *args: str) -> subprocess.CompletedProcess:
        """The helm CLI the build made, against this cluster, from the checkout (charts/ by relative path)."""
        from generator.controlplane import build

        return subprocess.run([str(build.binary(build.HELM_BINARY)), *args], env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=400)

    def api(self):
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api())

    def operator_log(self) -> str:
        """The operator pod's log, read as `kubectl logs` reads it: through pods/log and the kubelet."""
        operator = json.loads((self.dir / "state.json").read_text())["operator"]
        pods = self.core().list_namespaced_pod(operator["namespace"],
                                               label_selector="app.kubernetes.io/component=controller").items
        return "".join(self.core().read_namespaced_pod_log(p.metadata.name, operator["namespace"]) for p in pods)


def start_cluster(tmp: Path, values: dict | None, node: list[str] = (), kind: str | None = "process") -> LocalCluster:
    """`cluster up` with the `node` options, on the process node unless they name one (`--node`) or
    `kind` is None (the node `cluster up` chooses): each module's node stays what it chose."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    chosen = ["--node", kind] if kind and "--node" not in node else []
    argv = [sys.executable, "-m", "generator", "cluster", "up", "--dir", str(tmp), *chosen, *node]
    if values is not None:  # beside the cluster's folder: `cluster up` takes only an empty one, or a cluster's
        given = tmp.with_name(f"{tmp.name}-operator-values.yaml")
        given.write_text(yaml.safe_dump(values))
        argv += ["-f", str(given)]
    tmp.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, f"cluster up failed:\n{proc.stderr}"
    assert proc.stdout.startswith("export KUBECONFIG="), proc.stdout
    kubeconfig = Path(proc.stdout.strip().split("=", 1)[1])
    return LocalCluster(tmp, kubeconfig, {**env, "KUBECONFIG": str(kubeconfig)}, proc.stderr)


def stop_cluster(cluster: LocalCluster) -> None:
    proc = subprocess.run([sys.executable, "-m", "generator", "cluster", "down", "--dir", str(cluster.dir)],
                          env=cluster.env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr


def leftover_processes(cluster_dir: Path) -> list[str]:
    """Processes this cluster started that still run, whatever they exec'd into."""
    from generator.controlplane.layout import started_by

    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and started_by(int(entry.name), cluster_dir):
            try:
                if (entry / "stat").read_text().split()[2] == "Z":
                    continue
                out.append(f"{entry.name}: {(entry / 'cmdline').read_bytes().replace(bytes(1), b' ').decode()}")
            except OSError:
                continue
    return out


# The cluster the modules share, started once per test process (most tests only add jobs and pods
# of their own names or namespaces): the operator chart with leader election on, as test_operator
# checks, a node offering one GPU, as test_kubelet's scheduling tests need, and Kubeflow Trainer
# v2.3.0 with JobSet beside the operator, which every TrainJob test goes through. A module that
# overrides operator_values or node_options gets a cluster of its own for its module alone.
SHARED_VALUES = {"leaderElection": True}
SHARED_NODE = ["--gpus", "1", "--trainer"]


@pytest.fixture(scope="module")
def operator_values() -> dict | None:
    """Values for charts/pytorch-operator; a module overrides this to install it differently
    (an empty dict: the chart's defaults)."""
    return None


@pytest.fixture(scope="module")
def node_options() -> list[str] | None:
    """`cluster up` options for the node (--cpu, --memory, --gpus, --no-operator); a module overrides this."""
    return None


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("shared"), SHARED_VALUES, SHARED_NODE)
    try:
        yield c
    finally:
        stop_cluster(c)
        assert leftover_processes(c.dir) == [], "cluster down left processes behind"


@pytest.fixture
def ns(cluster, request):
    """A namespace of the test's own, so tests sharing a cluster never see each other's jobs."""
    from kubernetes import client

    # A DNS label of at most 42 characters; a long or parametrized name keeps a hash of the whole, so
    # two cases of one test never share a namespace (the first's may still be being deleted).
    whole = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower()).strip("-")
    if len(whole) > 40 or whole != request.node.name.removeprefix("test_").replace("_", "-"):
        whole = whole[:33].rstrip("-") + "-" + hashlib.sha1(request.node.name.encode()).hexdigest()[:6]
    name = "t-" + whole
    core = client.CoreV1Api(cluster.api())
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)  # its pods stop: the next test's job may listen on the same port


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory, operator_values, node_options):
    if operator_values is None and node_options is None:
        yield request.getfixturevalue("shared_cluster")
        return
    c = start_cluster(tmp_path_factory.mktemp("cluster"), operator_values or None, node_options or [])
    try:
        yield c
    finally:
        stop_cluster(c)
        assert leftover_processes(c.dir) == [], "cluster down left processes behind"
