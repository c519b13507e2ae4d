"""The node: the kubelet, containerd, runc and
kube-proxy run pods from images. The charts' images are pulled from the registry on this machine,
under the names the charts give them: the operator (installed by the chart, reaching the API server
at the `kubernetes` Service through kube-proxy, its `helm test` reaching its metrics Service's
ClusterIP) and the trainer, which trains digits as uid 1000 on a read-only root; your own image,
built and loaded into the registry, runs tests/userproject's job unchanged; an image the registry
lacks fails as a real pull does, and `diagnose` names it. The operator's job trains with its
Workers finding the Master through the cluster's CoreDNS, and again after its Worker was SIGKILLed
(restarted by the kubelet, followed by `logs -f`); a TrainJob trains through the real Trainer and
JobSet. A static probe program (tests/e2e/realnode/probe.c, FROM scratch, imported into
containerd) shows the Node reports containerd, a restricted pod runs as its user with no
capabilities and a seccomp filter (as the pod itself reads them), and a pod over its memory limit
is OOM-killed by the kernel; and `cluster down` leaves no process, mount, cgroup, network namespace
or kernel setting behind, also after the supervisor was killed with SIGKILL.

Its own clusters; `make e2e` builds the node where it can run. Each cluster's containerd holds
what it pulled (the trainer's image: about 5.5 GB unpacked), removed after the module."""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from generator.controlplane import network
from generator.controlplane.layout import Layout
from generator.controlplane.network import NETNS_DIR
from generator.controlplane.realnode import host, netns, oci
from generator.controlplane.realnode import node as real_node
from generator.controlplane.realnode.config import Folders
from generator.controlplane.realnode.kernel import KERNEL_RECORD
from generator.images import trainer as trainer_image
from generator.images.registry import default as default_registry
from tests.e2e.conftest import forget_images, kill_container, leftover_processes, needs_real_node, start_cluster, stop_cluster
from tests.support import ROOT
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    needs_real_node,
    pytest.mark.skipif(shutil.which("gcc") is None, reason="the probe image is built with gcc -static"),
]
PROBE = "localhost/pytorchjob-kit/probe:1"
PROBE_SOURCE = Path(__file__).parent / "realnode" / "probe.c"
NODE = ["--no-operator"]
# The trainer's image as the job chart names it by default, held by the registry on this machine.
TRAINER = f"{trainer_image.repository()}:{trainer_image.version()}"


def probe_archive(folder: Path) -> Path:
    program = folder / "probe"
    subprocess.run(["gcc", "-Os", "-Wall", "-Werror", "-static", "-o", str(program), str(PROBE_SOURCE)], check=True)
    image = oci.Image(PROBE, {"probe": (program.read_bytes(), 0o755)}, ("/probe",))
    return oci.write(image, folder / "probe.oci.tar")


# All six the kubelet sets (setupKernelTunables, pkg/kubelet/cm/container_manager_linux.go), named here
# and not taken from the code under test, so a setting it forgets to record shows.
KUBELET_SETTINGS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                    "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")


def kernel_settings() -> dict[str, str]:
    return {n: Path("/proc/sys", n.replace(".", "/")).read_text().strip() for n in KUBELET_SETTINGS
            if Path("/proc/sys", n.replace(".", "/")).exists()}


def left_on_machine(cluster_dir: Path) -> dict[str, list]:
    """What of the cluster is still on the machine: processes, mounts, cgroups, the sockets its
    shims made in the machine's /run/containerd/s (one per sandbox, named for a hash), the
    kubelet's links to its pods' logs in /var/log/containers, and the node's network namespace
    (with kube-proxy's rules in it)."""
    groups = [str(p) for p in host.cgroup_folders(cluster_dir) if p.exists()]
    folders = Folders.of(Layout(cluster_dir))
    sandboxes = [p.name for p in (folders.containerd / "root" / "io.containerd.grpc.v1.cri" / "sandboxes").glob("*")]
    assert sandboxes, "no pod sandbox was ever made"
    sockets = [str(s) for s in (host.SHIM_SOCKETS / hashlib.sha256(f"{folders.socket}/k8s.io/{sandbox}".encode()).hexdigest()
                                for sandbox in sandboxes) if s.exists()]
    return {"processes": leftover_processes(cluster_dir), "mounts": host.mounts_under(cluster_dir), "cgroups": groups,
            "shim sockets": sockets, "log links": host.container_log_links(folders),
            "network namespaces": [p.name for p in NETNS_DIR.glob(netns.name(network.bridge_name(cluster_dir)))]}


NOTHING_LEFT = {"processes": [], "mounts": [], "cgroups": [], "shim sockets": [], "log links": [],
                "network namespaces": []}


@pytest.fixture(scope="module")
def before() -> dict[str, str] | None:
    """The machine's settings before this module's first cluster, where no cluster held them then
    (else None: another test process's cluster runs, and the settings are its kubelet's)."""
    return None if KERNEL_RECORD.exists() else kernel_settings()


def held() -> dict:
    """The machine's record of the settings from before its first node (realnode/kernel.py), and the
    clusters holding it; {} once the last of them is down."""
    return json.loads(KERNEL_RECORD.read_text()) if KERNEL_RECORD.exists() else {}


def assert_kernel_settings_put_back(cluster_dir: Path, record: dict, before: dict[str, str] | None) -> None:
    """After this cluster's `down`: the machine's settings as they were before its first node, once no
    other cluster holds the record; while another cluster (the other test process's) still runs, its
    kubelet's, with this one no longer among the record's holders. `record` is the record just before
    the `down`, which must hold what the machine had before any node (`before`, where known)."""
    assert record and str(cluster_dir) in record["holders"], record
    if before is not None:
        assert record["values"] == before
    now = held()
    if now:
        assert str(cluster_dir) not in now["holders"] and now["values"] == record["values"], now
        return
    assert kernel_settings() == record["values"]


# Your own code as an image: tests/userproject's files on the trainer's image (its Python and torch),
# built and loaded into the registry on this machine before `cluster up`, as the README says.
USER_IMAGE = "registry.example.com/ml/toy:1.0"
USER_DOCKERFILE = """ARG BASE
FROM ${BASE}
COPY train.py toyset.py /workspace/
"""


@pytest.fixture(scope="module")
def user_image(tmp_path_factory) -> str:
    context = tmp_path_factory.mktemp("userproject")
    for name in ("train.py", "toyset.py"):
        shutil.copyfile(ROOT / "tests" / "userproject" / name, context / name)
    (context / "Dockerfile").write_text(USER_DOCKERFILE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base, _ = trainer_image.build(say=lambda line: None)  # the trainer's build in this machine's store (make image)
    for argv in (["image", "build", str(context), "-t", USER_IMAGE, "--build-arg", f"BASE={base}", "--quiet"],
                 ["image", "load", USER_IMAGE]):
        done = subprocess.run([sys.executable, "-m", "generator", *argv], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr
    return USER_IMAGE


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory, before):
    request.getfixturevalue("user_image")  # in the registry before `cluster up`, as a user would load it
    c = start_cluster(tmp_path_factory.mktemp("real"), None, ["--trainer"])
    real_node.import_image(Folders.of(Layout(c.dir)), probe_archive(tmp_path_factory.mktemp("probe")))
    yield c
    stop_cluster(c)
    forget_images(c.dir)


def pod(name: str, args: list[str], memory: str | None = None) -> dict:
    container = {"name": "probe", "image": PROBE, "imagePullPolicy": "Never", "args": args,
                 "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
    if memory:
        container["resources"] = {"limits": {"memory": memory, "cpu": "500m"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [container],
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}}}}


@pytest.fixture
def restricted_ns(cluster, request):
    """A namespace where PodSecurity enforces restricted: the pods below pass it as written."""
    name = "rn-" + request.node.name.removeprefix("test_").replace("_", "-")[:30].rstrip("-")
    core = cluster.core()
    core.create_namespace({"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    yield name
    core.delete_namespace(name)


def test_the_node_runs_containerd(cluster):
    status = json.loads(cluster.cli("cluster", "status", "--dir", str(cluster.dir), "--format", "json", check=True).stdout)
    assert {"containerd", "kubelet"} <= set(status["nodes"][0]["processes"])
    (node,) = cluster.core().list_node().items
    assert node.status.node_info.container_runtime_version.startswith("containerd://2."), node.status.node_info
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_a_restricted_pod_runs_as_its_user_without_capabilities_and_with_a_seccomp_filter(cluster, restricted_ns):
    core = cluster.core()
    core.create_namespaced_pod(restricted_ns, pod("identity", ["status"]))

    def logged():
        text = _log(core, "identity", restricted_ns)
        return text if text and "probe: done" in text else None

    text = wait_for(logged, 120, "the probe pod to print its identity")
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("probe"))
    status = {k: v.split() for k, v in fields.items()}
    assert status["Uid"] == ["1000"] * 4 and status["Gid"] == ["1000"] * 4
    assert status["NoNewPrivs"] == ["1"]
    assert status["Seccomp"] == ["2"]  # 2: a filter (RuntimeDefault), 0 would be none
    assert status["CapEff"] == ["0000000000000000"] and status["CapBnd"] == ["0000000000000000"]
    # The kubelet reports the phase a moment after the container has printed.
    running = wait_for(lambda: (p := core.read_namespaced_pod("identity", restricted_ns)).status.phase == "Running" and p,
                       30, "the identity pod's status to say Running")
    assert running.status.container_statuses[0].container_id.startswith("containerd://")


def test_the_host_reaches_a_pod_at_its_ip_through_the_nodes_network_namespace(cluster, restricted_ns):
    """Where the API server runs: it calls webhooks at their pods' IPs, routed to the node's namespace."""
    core = cluster.core()
    core.create_namespaced_pod(restricted_ns, pod("server", ["serve", "8443"]))
    wait_for(lambda: "listening" in (_log(core, "server", restricted_ns) or ""), 120, "the probe to listen")
    ip = wait_for(lambda: core.read_namespaced_pod("server", restricted_ns).status.pod_ip, 60, "the pod's IP")
    bridge = json.loads((cluster.dir / "state.json").read_text())["pod_network"]
    # The upper half of the cluster's /24: the lower is the host's bridge, where the API server listens.
    assert ipaddress.ip_address(ip) in list(ipaddress.ip_network(bridge["cidr"]).subnets())[1]
    with socket.create_connection((ip, 8443), timeout=10) as conn:
        assert conn.makefile().readline() == "probe 1000\n"


def _log(core, name: str, namespace: str) -> str | None:
    try:
        return core.read_namespaced_pod_log(name, namespace)
    except Exception:  # not started yet
        return None


class RegistryLog:
    """What the nodes asked the registry on this machine since this was made, from the log of its
    read-only twin, which they pull from."""

    def __init__(self):
        self.path = default_registry().readonly.log
        self.start = self.path.stat().st_size

    def asked(self) -> str:
        with open(self.path, "rb") as log:
            log.seek(self.start)
            return log.read().decode(errors="replace")


def test_the_trainer_image_is_pulled_from_the_registry_and_trains_as_uid_1000_on_a_read_only_root(cluster, restricted_ns):
    """The image named as the chart names it, pulled for this pod (Always) from the registry on this machine."""
    core = cluster.core()
    log = RegistryLog()
    train = "python -m trainer --backend gloo --dataset digits --epochs 1"
    container = {
        "name": "pytorch", "image": TRAINER, "imagePullPolicy": "Always",
        # The image's own user and root, read from inside before training.
        "command": ["sh", "-c", f"echo uid=$(id -u); touch /probe 2>&1; exec {train}"],
        "resources": {"limits": {"memory": "4Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "output", "mountPath": "/opt/pytorch/output"}, {"name": "tmp", "mountPath": "/tmp"}]}
    core.create_namespaced_pod(restricted_ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "digits"},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container],
                 "volumes": [{"name": "output", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}}}})

    def ended():
        phase = core.read_namespaced_pod("digits", restricted_ns).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(ended, 900, "the trainer pod to end (its first pull is about 3 GB)", interval=2)
    text = core.read_namespaced_pod_log("digits", restricted_ns)
    assert phase == "Succeeded", text
    assert "uid=1000" in text and "touch: cannot touch '/probe': Read-only file system" in text
    assert "epoch 1/1: test accuracy" in text and "wrote /opt/pytorch/output/mnist_cnn.pt" in text
    # containerd asked the registry on this machine for it, under the name's registry, over mutual TLS.
    held = default_registry().has(TRAINER)
    assert held and f"/v2/{trainer_image.repository()}/manifests/{held}" in log.asked()
    pulled = [e.message for e in core.list_namespaced_event(restricted_ns, field_selector="involvedObject.name=digits").items
              if e.reason == "Pulled"]
    assert pulled and pulled[0].startswith(f'Successfully pulled image "{TRAINER}"'), pulled


def test_the_operators_job_trains_its_workers_finding_the_master_through_cluster_dns(cluster, tmp_path):
    """The operator's Workers wait in their init container (the chart's alpine:3.10, `nslookup
    <job>-master-0`) until the cluster's CoreDNS answers with the Master's pod; then all train."""
    values = tmp_path / "dns-values.yaml"
    # Three pods beside the controllers on this machine's own CPUs (the real node offers what it has: 2 here).
    cluster.cli("values", "--name", "dns", "--workers", "2", "--cpu", "300m", "--memory", "1Gi",
                "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", "-o", str(values), check=True)
    done = cluster.cli("submit", str(values), "--wait", "--timeout", "300", timeout=400)
    core = cluster.core()
    assert done.returncode == 0, done.stderr + cluster.cli("diagnose", "dns").stdout
    for worker in ("dns-worker-0", "dns-worker-1"):
        waited = core.read_namespaced_pod_log(worker, "default", container="init-pytorch")
        master_ip = core.read_namespaced_pod("dns-master-0", "default").status.pod_ip
        assert f"Name:\tdns-master-0.default.svc.cluster.local\nAddress: {master_ip}" in waited, waited
    assert "epoch 1/1: test accuracy" in core.read_namespaced_pod_log("dns-master-0", "default")


def test_your_own_image_loaded_into_the_registry_runs_the_userprojects_job_unchanged(cluster, tmp_path):
    """tests/userproject/pytorchjob.yaml as written, naming registry.example.com/ml/toy:1.0: the
    image `image build` made and `image load` put in the registry is what containerd pulls."""
    log = RegistryLog()
    done = cluster.cli("submit", "tests/userproject/pytorchjob.yaml", "-n", "default", "--wait", "--timeout", "400",
                       timeout=500)
    assert done.returncode == 0, done.stderr + cluster.cli("diagnose", "toy").stdout
    held = default_registry().has(USER_IMAGE)
    assert held and f"/v2/registry.example.com/ml/toy/manifests/{held}" in log.asked()
    core = cluster.core()
    result = json.loads((cluster.claim_folder("toy-output") / "result.json").read_text())
    assert result["world_size"] == 3
    assert "toy: 3 ranks (gloo, cpu), 160 points each" in core.read_namespaced_pod_log("toy-master-0", "default")


def test_a_trainjob_trains_through_trainer_and_jobset_its_nodes_meeting_at_node_0_0_by_cluster_dns(cluster, tmp_path):
    """Trainer's controller renders the TrainJob into a JobSet (its runtimes applied by the chart's
    installer, alpine's `apk add kubectl`), whose headless Service gives node 0-0 the name every
    node's torchrun dials."""
    values = tmp_path / "v2-values.yaml"
    cluster.cli("values", "--target", "v2", "--name", "v2", "--workers", "1", "--cpu", "300m", "--memory", "1Gi",
                "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", "-o", str(values), check=True)
    done = cluster.cli("submit", str(values), "--wait", "--timeout", "300", timeout=400)
    assert done.returncode == 0, done.stderr + cluster.cli("diagnose", "v2").stdout
    assert "v2: Complete (AllJobsCompleted)" in done.stderr
    core = cluster.core()
    (first,) = [p for p in core.list_namespaced_pod("default", label_selector="jobset.sigs.k8s.io/jobset-name=v2").items
                if p.metadata.name.startswith("v2-node-0-0-")]
    env = {e.name: e.value for e in first.spec.containers[0].env}
    assert env["PET_MASTER_ADDR"] == "v2-node-0-0.v2"
    assert "epoch 1/1: test accuracy" in core.read_namespaced_pod_log(first.metadata.name, "default")


def test_a_worker_killed_mid_training_is_restarted_by_the_kubelet_and_the_job_resumes_to_succeeded(cluster, tmp_path):
    """SIGKILL to the Worker's container process (as the kernel's OOM killer or a crash would end
    it): the kubelet restarts it under restartPolicy OnFailure, the trainer resumes from its
    checkpoint, and `logs -f` follows the job to its end."""
    values = tmp_path / "kill-values.yaml"
    cluster.cli("values", "--name", "kill", "--workers", "1", "--cpu", "300m", "--memory", "1Gi",
                "--arg=--dataset=digits", "--arg=--epochs=12", "--arg=--threads=1", "-o", str(values), check=True)
    cluster.cli("submit", str(values), check=True)
    core = cluster.core()

    def trained_two_epochs():
        from kubernetes import client

        try:
            return "epoch 2/12" in core.read_namespaced_pod_log("kill-master-0", "default")
        except client.ApiException:  # not started yet
            return False

    wait_for(trained_two_epochs, 240, "the Master to finish its second epoch", interval=1)
    worker = core.read_namespaced_pod("kill-worker-0", "default").status.container_statuses[0]
    kill_container(cluster, worker.container_id)
    followed = cluster.cli("logs", "kill", "-f", timeout=400)
    assert followed.returncode == 0, followed.stderr
    assert "master-0 | epoch 12/12: test accuracy" in followed.stdout, followed.stdout
    done = cluster.cli("wait", "kill", timeout=300)
    assert done.returncode == 0, done.stderr
    assert core.read_namespaced_pod("kill-worker-0", "default").status.container_statuses[0].restart_count >= 1


def create_master_job(cluster, name: str, restart_policy: str, container: dict) -> None:
    """A PyTorchJob of one Master in namespace default, as a user's manifest makes it."""
    from kubernetes import client

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": "default"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": restart_policy,
                                                       "template": {"spec": {"containers": [container]}}}}}}
    client.CustomObjectsApi(cluster.api()).create_namespaced_custom_object("kubeflow.org", "v1", "default",
                                                                           "pytorchjobs", job)


def master_status(core, job: str):
    """The Master pod's container status; None before the operator made the pod or the kubelet reported it."""
    from kubernetes import client

    try:
        statuses = core.read_namespaced_pod(f"{job}-master-0", "default").status.container_statuses or []
    except client.ApiException:
        return None
    return statuses[0] if statuses else None


def test_an_image_the_registry_lacks_fails_as_a_pull_does_and_diagnose_names_it(cluster):
    """The operator (pulled from the registry, reaching the API server through the `kubernetes`
    Service) makes the job's pod; the node's pull fails for real, and `diagnose` reads it."""
    absent = "ghcr.io/pytorchjob-kit/absent:1.0"
    log = RegistryLog()
    create_master_job(cluster, "absent", "Never", {"name": "pytorch", "image": absent})
    core = cluster.core()

    def waiting():
        status = master_status(core, "absent")
        reason = status and status.state.waiting and status.state.waiting.reason
        return reason if reason in ("ErrImagePull", "ImagePullBackOff") else None

    wait_for(waiting, 180, "the job's pod to fail its pull")
    # (A manifest the registry lacks is logged as an error, by its tag.)
    assert "/v2/ghcr.io/pytorchjob-kit/absent/manifests/1.0" in log.asked()
    report = cluster.cli("diagnose", "absent", "-n", "default")
    assert report.returncode == 1, report.stderr
    text = " ".join(report.stdout.split())
    assert "Pod/absent-master-0: ErrImagePull" in text or "Pod/absent-master-0: ImagePullBackOff" in text, text
    assert f'failed to pull and unpack image "{absent}"' in text, text


def test_the_job_chart_installs_trains_upgrades_and_uninstalls_through_helm(cluster, tmp_path):
    """charts/pytorchjob with the helm CLI, as on any cluster: the release's job trains on the real
    node, upgrades in place, and uninstalling it takes its job and pods away."""
    values = tmp_path / "chart-values.yaml"
    cluster.cli("values", "--name", "chart", "--workers", "1", "--cpu", "300m", "--memory", "1Gi",
                "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", "-o", str(values), check=True)
    done = cluster.helm("install", "chart", "charts/pytorchjob", "-f", str(values), "-n", "default")
    assert done.returncode == 0, done.stderr
    waited = cluster.cli("wait", "chart", "--timeout", "300", timeout=400)
    assert waited.returncode == 0, waited.stderr + cluster.cli("diagnose", "chart").stdout
    core = cluster.core()
    assert "epoch 1/1: test accuracy" in core.read_namespaced_pod_log("chart-master-0", "default")
    done = cluster.helm("upgrade", "chart", "charts/pytorchjob", "-f", str(values), "-n", "default",
                "--set", "runPolicy.ttlSecondsAfterFinished=3600")
    assert done.returncode == 0, done.stderr
    from kubernetes import client

    jobs = client.CustomObjectsApi(cluster.api())
    job = jobs.get_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", "chart")
    assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 3600
    assert cluster.helm("uninstall", "chart", "-n", "default").returncode == 0
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector="training.kubeflow.org/job-name=chart").items,
             120, "the release's pods to go")
    names = [j["metadata"]["name"] for j in jobs.list_namespaced_custom_object("kubeflow.org", "v1", "default",
                                                                                "pytorchjobs")["items"]]
    assert "chart" not in names


def test_a_job_asking_more_cpu_than_the_node_has_stays_pending_and_diagnose_names_it(cluster, tmp_path):
    """The real node offers this machine's CPUs: a pod asking for 64 is refused by the scheduler."""
    values = tmp_path / "greedy-values.yaml"
    cluster.cli("values", "--name", "greedy", "--workers", "0", "--cpu", "64", "--memory", "1Gi",
                "--arg=--dataset=digits", "-o", str(values), check=True)
    cluster.cli("submit", str(values), check=True)
    try:
        core = cluster.core()

        def refused():
            return [e for e in core.list_namespaced_event("default", field_selector="involvedObject.name=greedy-master-0")
                    .items if e.reason == "FailedScheduling"]

        assert "Insufficient cpu" in wait_for(refused, 60, "the scheduler's FailedScheduling event")[0].message
        found = cluster.cli("diagnose", "greedy", "--format", "json")
        assert found.returncode == 1, found.stderr
        top = json.loads(found.stdout)[0]
        assert (top["severity"], top["reason"], top["object"]) == ("error", "Insufficient cpu", "Pod/greedy-master-0")
        # What the kubelet measured on this machine, as the node reports it.
        offered = core.list_node().items[0].status.allocatable["cpu"]
        assert top["fix"] == (f"lower `resources.requests.cpu` (each pod asks for 64; the nodes offer {offered} in all), "
                              "or use fewer or larger nodes")
    finally:
        cluster.cli("delete", "greedy")


def test_a_job_whose_container_fails_crash_loops_under_the_kubelet_and_diagnose_names_it(cluster):
    # The probe, asked for what it does not do, prints its usage and exits 64 (EX_USAGE).
    create_master_job(cluster, "crash", "OnFailure", {"name": "pytorch", "image": PROBE, "imagePullPolicy": "Never",
                                                      "args": ["boom"]})
    core = cluster.core()

    # Restarted twice, each after a back-off; between restarts the kubelet reports the container
    # terminated most of the time and CrashLoopBackOff only a while, so a poll may miss the latter.
    wait_for(lambda: (status := master_status(core, "crash")) and status.restart_count >= 2, 120,
             "the kubelet to restart crash-master-0 twice")
    report = cluster.cli("diagnose", "crash", "-n", "default")
    assert report.returncode == 1, report.stderr
    text = " ".join(report.stdout.split())
    # Backing off, or between two restarts: the kubelet's state at the moment `diagnose` reads it.
    assert re.search(r"1\. \[error\] Pod/crash-master-0: (CrashLoopBackOff|Error) container pytorch exited with code "
                     r"64 \(Error\), restarted \d+ times?", text), text
    assert "its last log lines: usage: probe status" in text, text
    # The operator's echo of it as the job's events is not told again.
    assert "1 finding(s)" in text, text


def test_a_pod_over_its_memory_limit_is_oom_killed_by_the_kernel(cluster, restricted_ns):
    core = cluster.core()
    core.create_namespaced_pod(restricted_ns, pod("hungry", ["eat", "400"], memory="128Mi"))

    def terminated():
        statuses = core.read_namespaced_pod("hungry", restricted_ns).status.container_statuses or []
        return statuses and statuses[0].state.terminated

    ended = wait_for(terminated, 120, "the hungry pod's container to end")
    assert (ended.reason, ended.exit_code) == ("OOMKilled", 137)
    assert "ate 400 MiB" not in core.read_namespaced_pod_log("hungry", restricted_ns)


# The operator chart's `helm test` image (curl), from the registry on this machine.
CURL = "docker.io/curlimages/curl:8.10.1"
# Retried: a new cluster's first pod once failed to connect for 7 s (curl's 000, no TLS error in
# either API server's log); another cluster's server would fail every try (its CA is not this one).
WHOAMI = ('S=/var/run/secrets/kubernetes.io/serviceaccount; curl -sS --retry 10 --retry-all-errors --retry-delay 1 '
          '--connect-timeout 5 -o /dev/null -w "%{http_code}" --cacert $S/ca.crt '
          '-H "Authorization: Bearer $(cat $S/token)" -H "Content-Type: application/json" -X POST '
          '-d \'{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}\' '
          'https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/apis/authentication.k8s.io/v1/selfsubjectreviews')


def test_two_clusters_side_by_side_each_take_their_pods_to_their_own_api_server(cluster, tmp_path_factory):
    """Both clusters' pods dial the same `kubernetes` Service address; each reaches its own API
    server, which alone knows its CA and accepts its service account's token (201, not a TLS
    failure or 401)."""
    side = start_cluster(tmp_path_factory.mktemp("real-side"), None, NODE)
    try:
        for c in (cluster, side):
            c.core().create_namespaced_pod("default", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "whoami"},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "curl", "image": CURL,
                                                                   "command": ["sh", "-c", WHOAMI]}]}})
        for c in (cluster, side):
            core = c.core()
            wait_for(lambda core=core: core.read_namespaced_pod("whoami", "default").status.phase in ("Succeeded", "Failed"),
                     180, "the whoami pod to end")
            said = core.read_namespaced_pod_log("whoami", "default")  # the failed tries' errors, then the code
            assert said.rstrip().endswith("201"), said
    finally:
        stop_cluster(side)
        forget_images(side.dir)
    # Its `cluster down` took its own node's namespace away (kube-proxy's rules with it), and left this cluster's.
    assert not (NETNS_DIR / netns.name(network.bridge_name(side.dir))).exists()
    assert (NETNS_DIR / netns.name(network.bridge_name(cluster.dir))).exists()


def test_the_operators_helm_test_reaches_its_metrics_service_at_its_cluster_ip(cluster):
    """The chart's test pod curls the operator's metrics Service by name: CoreDNS gives its
    ClusterIP, and kube-proxy's rules in the node's namespace take it to the operator's pod."""
    tested = cluster.helm("test", "training-operator", "-n", "kubeflow")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Phase:          Succeeded" in tested.stdout


def run_a_pod(c) -> None:
    """A probe pod running: containers, mounts and cgroups for `cluster down` to leave nothing of."""
    core = c.core()
    core.create_namespaced_pod("default", pod("sleeper", ["status"]))
    wait_for(lambda: core.read_namespaced_pod("sleeper", "default").status.phase == "Running", 120,
             "the probe pod to run")
    assert any(p.exists() for p in host.cgroup_folders(c.dir)), "no cluster cgroup while up"
    assert host.mounts_under(c.dir / "node"), "containerd mounted nothing while a pod runs"


# The last two run after the tests above, on this module's cluster and then on one of their own: the
# kernel settings are put back by the last real node of the machine to go down.
def test_down_stops_the_pods_with_sigterm_and_leaves_nothing_and_puts_the_kernel_settings_back(cluster, before):
    run_a_pod(cluster)
    record = held()
    stop_cluster(cluster)
    assert left_on_machine(cluster.dir) == NOTHING_LEFT
    assert_kernel_settings_put_back(cluster.dir, record, before)
    # The container was asked to stop, as a pod's deletion asks it, before anything was killed.
    (log,) = (cluster.dir / "node" / "pod-logs").glob("default_sleeper_*/probe/0.log")
    assert "probe: SIGTERM" in log.read_text()


def test_down_after_the_supervisor_was_killed_leaves_nothing(tmp_path_factory, before):
    c = start_cluster(tmp_path_factory.mktemp("real-killed"), None, NODE)
    try:
        real_node.import_image(Folders.of(Layout(c.dir)), probe_archive(tmp_path_factory.mktemp("probe")))
        run_a_pod(c)
        supervisor = json.loads((c.dir / "state.json").read_text())["pid"]
    except BaseException:
        stop_cluster(c)  # failed before the kill: leave no cluster running on the machine
        raise
    record = held()
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{supervisor}").exists() or
             Path(f"/proc/{supervisor}/stat").read_text().split()[2] == "Z", 30, "the supervisor to die")
    stop_cluster(c)
    assert left_on_machine(c.dir) == NOTHING_LEFT
    assert_kernel_settings_put_back(c.dir, record, before)
    forget_images(c.dir)
