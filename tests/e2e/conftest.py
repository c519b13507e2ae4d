"""The end-to-end suite: a real control plane (`generator cluster up`), shared by the modules that
can share one, the real operator, the real webhook. Needs Go for the first build; `make e2e` runs it."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
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
        from generator.controlplane import build, pins

        return subprocess.run([str(build.binary(pins.HELM_BINARY)), *args], env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=400)

    def api(self):
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api())

    def custom(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.api())

    # The helpers the modules share: a job by the kind's own coordinates
    # (generator/kinds) and a pod's log as far as it goes.
    def job(self, kind, name: str, namespace: str) -> dict | None:
        """The job as the API server holds it; None when it has none of that name."""
        from kubernetes import client

        try:
            return self.custom().get_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_job(self, body: dict, namespace: str) -> dict:
        """A job manifest (PyTorchJob, TrainJob) created as kubectl would, through its kind's resource."""
        from generator import kinds

        kind = kinds.for_object(body)
        return self.custom().create_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, body)

    def log(self, pod: str, namespace: str, container: str | None = None, **options) -> str:
        """The container's log so far: "" while it has not started (the kubelet has none to serve)."""
        from kubernetes import client

        try:
            return self.core().read_namespaced_pod_log(pod, namespace, container=container, **options) or ""
        except client.ApiException as exc:
            if exc.status in (400, 404):  # waiting to start, or not created yet
                return ""
            raise

    def claim_folder(self, claim: str, namespace: str = "default") -> Path:
        """Where a bound claim's files are on this machine: its volume's folder, whatever path the
        pods mounted it at (a container on the real node sees its own mount path)."""
        core = self.core()
        volume = core.read_namespaced_persistent_volume_claim(claim, namespace).spec.volume_name
        return Path(core.read_persistent_volume(volume).spec.host_path.path)

    def nodes(self) -> list[str]:
        """The cluster's nodes' names, the first first, as its supervisor records them."""
        return list(json.loads((self.dir / "state.json").read_text())["nodes"])

    def operator_log(self) -> str:
        """The operator pod's log, read as `kubectl logs` reads it: through pods/log and the kubelet."""
        operator = json.loads((self.dir / "state.json").read_text())["operator"]
        pods = self.core().list_namespaced_pod(operator["namespace"],
                                               label_selector="app.kubernetes.io/component=controller").items
        return "".join(self.core().read_namespaced_pod_log(p.metadata.name, operator["namespace"]) for p in pods)


def start_cluster(tmp: Path, values: dict | None, node: list[str] = ()) -> LocalCluster:
    """`cluster up` with the `node` options (--trainer, --gpus, ...)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "generator", "cluster", "up", "--dir", str(tmp), *node]
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


def _real_node_cannot() -> str | None:
    from generator.controlplane.realnode import support

    return support.why_not(support.Machine.read())


# Where the node cannot run, every cluster test is skipped with the reason `cluster up` would refuse with.
REAL_NODE_CANNOT = _real_node_cannot()
needs_real_node = pytest.mark.skipif(bool(REAL_NODE_CANNOT), reason=f"the node cannot run here: {REAL_NODE_CANNOT}")


def forget_images(cluster_dir: Path) -> None:
    """Every node's containerd content and snapshots, once its cluster is down: gigabytes per node
    (the trainer's image unpacked), not worth keeping beside its logs; pytest keeps its last three
    runs' folders, so a three-node cluster's left 17 GB behind each run."""
    from generator.controlplane.layout import Layout
    from generator.controlplane.realnode.config import Folders

    for folders in Folders.every(Layout(cluster_dir)):
        shutil.rmtree(folders.containerd / "root", ignore_errors=True)


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
# of their own names or namespaces): the operator chart with leader election on, as test_operator checks, and Kubeflow Trainer
# v2.3.0 with JobSet beside the operator, which every TrainJob test goes through. A module that
# overrides operator_values or node_options gets a cluster of its own for its module alone.
SHARED_VALUES = {"leaderElection": True}
SHARED_NODE = ["--trainer"]


@pytest.fixture(scope="module")
def operator_values() -> dict | None:
    """Values for charts/pytorch-operator; a module overrides this to install it differently
    (an empty dict: the chart's defaults)."""
    return None


@pytest.fixture(scope="module")
def node_options() -> list[str] | None:
    """`cluster up` options for the node; a module overrides this (--no-operator, --trainer, --gpus, --image ...)."""
    return None


def container_pid(container_id: str) -> int:
    """A container's first process: containerd's (`containerd://ID`) is the oldest process in a cgroup
    whose path ends in the container's ID."""
    _, _, ident = container_id.partition("://")
    found = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/cgroup") if _in_cgroup_of(p, ident)]
    assert found, f"no process in the cgroup of {container_id}"
    return min(found, key=lambda pid: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]))


def _in_cgroup_of(cgroup: Path, ident: str) -> bool:
    try:
        return any(line.endswith(ident) for line in cgroup.read_text().splitlines())
    except OSError:  # it ended meanwhile
        return False


def kill_container(cluster: LocalCluster, container_id: str) -> None:
    """SIGKILL to a running container, as the OOM killer or a crash would end it: through containerd
    (its first process; the kernel ends the rest of its PID namespace with it)."""
    _, _, ident = container_id.partition("://")
    from generator.controlplane.layout import Layout
    from generator.controlplane.realnode.config import Folders, ctr

    killed = subprocess.run(ctr(Folders.of(Layout(cluster.dir)), "tasks", "kill", "--signal", "SIGKILL", ident),
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == 0, killed.stderr


def trainer_image() -> str:
    from generator.images import trainer

    return f"{trainer.repository()}:{trainer.version()}"


def pull_images(cluster: LocalCluster, images: list[str], within: float = 240) -> None:
    """`images` pulled once before the tests (the trainer's is 3 GB from the registry, about a
    minute), as a CI job loads its images into a new cluster first: a test's wait then measures its
    job, not the pull."""
    from tests.support.waiting import wait_for

    core = cluster.core()
    pod = {"metadata": {"name": "pull-images"},
           "spec": {"restartPolicy": "Never", "containers": [
               {"name": f"pull-{i}", "image": image, "command": ["true"]} for i, image in enumerate(images)]}}
    core.create_namespaced_pod("default", pod)

    def pulled() -> bool:
        status = core.read_namespaced_pod("pull-images", "default").status
        waiting = [s.state.waiting for s in status.container_statuses or [] if s.state.waiting]
        # A failed pull does not end the pod: say why at once rather than wait out the test's timeout.
        assert not [w for w in waiting if w.reason in ("ErrImagePull", "ImagePullBackOff")], waiting
        return status.phase == "Succeeded"

    try:
        wait_for(pulled, within, f"{', '.join(images)} to be pulled")
    finally:
        core.delete_namespaced_pod("pull-images", "default", grace_period_seconds=0)


def owns_clusters(module) -> bool:
    """Whether a module brings up clusters of its own (its own operator values or node options, a
    `cluster` fixture of its own, or `cluster up` in its tests, said by OWN_CLUSTERS) rather than
    using the shared one."""
    return getattr(module, "OWN_CLUSTERS", False) or any(
        name in vars(module) for name in ("operator_values", "node_options", "cluster"))


def pytest_collection_modifyitems(items):
    """Modules with clusters of their own first (one file per test process at a time, `--dist
    loadfile`): each process then goes on to the shared cluster once, rather than stopping and
    starting it between modules, and the longest modules start first."""
    items.sort(key=lambda item: not (item.get_closest_marker("e2e") and owns_clusters(item.module)))


class Shared:
    """This test process's shared cluster, started when a module first needs it and stopped before a
    module that brings up clusters of its own: each cluster's containerd unpacks the trainer's image
    anew (5 GB and more), so a process holds one cluster's images at a time, and two processes two."""

    def __init__(self, folder):
        self.folder = folder  # a new folder for each start
        self.cluster: LocalCluster | None = None

    def get(self) -> LocalCluster:
        if self.cluster is None:
            c = start_cluster(self.folder(), SHARED_VALUES, SHARED_NODE)
            try:
                pull_images(c, [trainer_image()])
            except BaseException:
                _down(c)
                raise
            self.cluster = c
        return self.cluster

    def release(self) -> None:
        if self.cluster is not None:
            c, self.cluster = self.cluster, None
            _down(c)


def _down(c: LocalCluster) -> None:
    """`cluster down`, then its images forgotten (gigabytes), whatever the check for leftovers finds."""
    stop_cluster(c)
    left = leftover_processes(c.dir)
    forget_images(c.dir)
    assert left == [], "cluster down left processes behind"


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    s = Shared(lambda: tmp_path_factory.mktemp("shared"))
    yield s
    s.release()


@pytest.fixture(scope="module", autouse=True)
def one_cluster_at_a_time(request):
    """Before a module with clusters of its own, the shared one goes (see Shared)."""
    if request.node.get_closest_marker("e2e") and owns_clusters(request.module):
        request.getfixturevalue("shared").release()


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
        yield request.getfixturevalue("shared").get()
        return
    c = start_cluster(tmp_path_factory.mktemp("cluster"), operator_values or None, node_options or [])
    try:
        yield c
    finally:
        _down(c)
