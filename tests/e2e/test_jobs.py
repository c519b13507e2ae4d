"""Jobs and pods on the shared cluster's node (kubelet, containerd, runc). The operator's and Trainer's jobs train, are followed while they
run, lose a Worker or a node to SIGKILL and end as `generator run` ends the same job, scale
elastically, and fail or wait in ways `diagnose` names; single pods get their env, volumes and
probes, restart with a back-off and stop with SIGTERM then SIGKILL, as Kubernetes gives them. All in
a namespace of this module's own. The node's own checks are in test_real_node, its capacity's in
test_node_capacity."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generator.controlplane import network
from tests.e2e.conftest import container_pid, kill_container, trainer_image
from tests.support import ROOT, procfs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
DIGITS = ["--arg=--dataset=digits", "--arg=--threads=1"]
NS = "jobs"


@pytest.fixture(scope="module", autouse=True)
def jobs(cluster):
    """This module's namespace on the shared cluster: its job names are its own there."""
    core = cluster.core()
    core.create_namespace({"metadata": {"name": NS}})
    yield NS
    core.delete_namespace(NS)


def values(cluster, tmp_path: Path, name: str, *options: str) -> Path:
    # Small requests: the real node offers this machine's CPUs (2 here), shared with the controllers.
    path = tmp_path / f"{name}.yaml"
    cluster.cli("values", "--name", name, "--cpu", "100m", "--memory", "256Mi", *options, "-o", str(path), check=True)
    return path


def pods(cluster, job: str) -> dict:
    items = cluster.core().list_namespaced_pod(NS, label_selector=f"training.kubeflow.org/job-name={job}").items
    return {p.metadata.name: p for p in items}


def ended_pods(cluster, job: str) -> dict | None:
    """The job's pods once every one has ended, else None."""
    found = pods(cluster, job)
    return found if all(p.status.phase in ("Succeeded", "Failed") for p in found.values()) else None


def events(cluster, name: str) -> list:
    return cluster.core().list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items


def job_state(cluster, name: str) -> str:
    report = json.loads(cluster.cli("status", name, "-n", NS, "--format", "json", check=True).stdout)
    return report["state"]


def delete_job(cluster, name: str) -> None:
    from kubernetes import client

    cluster.cli("delete", name, "-n", NS, check=True)
    try:
        cluster.core().delete_namespaced_persistent_volume_claim(f"{name}-output", NS)
    except client.ApiException as exc:
        assert exc.status == 404
    wait_for(lambda: not pods(cluster, name), 120, f"the pods of {name} to go")


def log_of(cluster, pod: str, container: str | None = None, **options) -> str:
    return cluster.core().read_namespaced_pod_log(pod, NS, container=container, **options) or ""


def _safe_log(cluster, pod: str, container: str = "pytorch") -> str:
    try:
        return log_of(cluster, pod, container)
    except Exception:  # not started yet
        return ""


def _previous(cluster, pod: str) -> str:
    try:
        return log_of(cluster, pod, "pytorch", previous=True)
    except Exception:  # no earlier run
        return ""


def on_the_bridge(cluster, address: str) -> bool:
    """An address of the cluster's pod network (the real node's pods take the upper half of its /24)."""
    import ipaddress

    net = network.PodNetwork(**json.loads((cluster.dir / "state.json").read_text())["pod_network"])
    return ipaddress.ip_address(address) in net.subnet and address != net.gateway


def kill(cluster, pod) -> None:
    kill_container(cluster, pod.status.container_statuses[0].container_id)


# --- the operator ------------------------------------------------------------------------------
def test_the_operator_runs_as_a_pod_of_the_node(cluster):
    operator = json.loads((cluster.dir / "state.json").read_text())["operator"]
    (pod,) = cluster.core().list_namespaced_pod(operator["namespace"], label_selector="app.kubernetes.io/component=controller").items
    assert pod.status.phase == "Running" and on_the_bridge(cluster, pod.status.pod_ip)
    assert {(c.type, c.status) for c in pod.status.conditions} >= {("Ready", "True"), ("PodScheduled", "True")}
    # Its webhook is served through the endpoints the EndpointSlice controller wrote for the Ready pod.
    from kubernetes import client

    slices = client.DiscoveryV1Api(cluster.api()).list_namespaced_endpoint_slice(operator["namespace"]).items
    webhook = next(s for s in slices if any(p.port == 9443 for p in s.ports))
    assert webhook.metadata.labels["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io"
    assert [(e.target_ref.name, e.addresses) for e in webhook.endpoints] == [(pod.metadata.name, [pod.status.pod_ip])]


def test_kubeflow_trainer_is_a_helm_release_beside_the_operators(cluster):
    # As on a cluster moving to v2: the TrainJobs below go through it.
    listed = json.loads(cluster.helm("list", "-A", "-o", "json").stdout)
    assert sorted((r["name"], r["namespace"], r["status"], r["chart"]) for r in listed) == [
        ("kubeflow-trainer", "kubeflow-system", "deployed", "kubeflow-trainer-2.3.0"),
        ("training-operator", "kubeflow", "deployed", "pytorch-operator-0.1.0")]
    # The operator's chart came from the registry on this machine, as an OCI artifact.
    from generator.controlplane import registry

    operator = json.loads((cluster.dir / "state.json").read_text())["operator"]
    assert operator["chart"] == f"oci://{registry.default().address}/charts/pytorch-operator"


# --- the demo job ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(cluster, tmp_path_factory):
    path = values(cluster, tmp_path_factory.mktemp("demo"), "demo", "--workers", "2", "--output-size", "1Gi",
                  *DIGITS, "--arg=--epochs=4")
    proc = cluster.cli("submit", str(path), "-n", NS, "--wait", "--timeout", "600", timeout=700)
    yield proc
    delete_job(cluster, "demo")


@pytest.mark.timeout(600)  # the demo's three pods train four epochs, beside the controllers on the node's CPUs
def test_the_demo_job_trains_and_succeeds_through_the_real_operator(cluster, demo):
    assert demo.returncode == 0, demo.stderr
    assert "pytorchjob demo succeeded" in demo.stdout + demo.stderr
    folder = cluster.claim_folder("demo-output", NS)
    assert folder.is_relative_to(cluster.dir)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["world_size"] == 3 and metrics["final_accuracy"] >= 0.85
    assert (folder / "mnist_cnn.pt").stat().st_size > 0
    # The operator declares the job Succeeded when the Master's pod ends; each Worker's pod reports its
    # own end when its kubelet next syncs, a moment later.
    ended = wait_for(lambda: ended_pods(cluster, "demo"), 60, "the demo's pods to end")
    ips = set()
    for name, pod in ended.items():
        assert pod.status.phase == "Succeeded", name
        assert on_the_bridge(cluster, pod.status.pod_ip), pod.status.pod_ip
        ips.add(pod.status.pod_ip)
        (state,) = [c.state.terminated for c in pod.status.container_statuses]
        assert (state.exit_code, state.reason) == (0, "Completed")
    assert len(ips) == 3  # each pod its own IP, all three listening on the job's port 23456 at once


def test_the_operators_init_containers_wait_for_the_master_and_pass(cluster, demo):
    job = pods(cluster, "demo")
    workers = {n: p for n, p in job.items() if "worker" in n}
    assert len(workers) == 2
    master_ip = job["demo-master-0"].status.pod_ip
    # The Master's Service resolved to the Master pod's own IP by the cluster's CoreDNS, as BIND's
    # nslookup prints it.
    answer = f"Name:\tdemo-master-0.{NS}.svc.cluster.local\nAddress: {master_ip}"
    for name, pod in workers.items():
        (init,) = pod.status.init_container_statuses
        assert (init.name, init.state.terminated.exit_code, init.state.terminated.reason) == ("init-pytorch", 0, "Completed")
        assert answer in log_of(cluster, name, "init-pytorch")


def test_generator_logs_reads_the_job_through_the_kubelet(cluster, demo):
    proc = cluster.cli("logs", "demo", "-n", NS, "--replica", "master-0", check=True)
    assert "epoch 4/4: test accuracy" in proc.stdout
    tail = log_of(cluster, "demo-master-0", "pytorch", tail_lines=1, timestamps=True)
    stamp, _, line = tail.partition(" ")
    assert stamp.startswith("20") and stamp.endswith("Z") and line.startswith("wrote ")


# --- a job followed while it runs ------------------------------------------------------------
@pytest.mark.timeout(600)
def test_status_logs_follow_and_wait_on_a_running_job(cluster, tmp_path):
    # Long enough to be running when `wait --for Running` asks, short enough not to keep the suite waiting.
    path = values(cluster, tmp_path, "follow", "--workers", "1", *DIGITS, "--arg=--epochs=12")
    cluster.cli("submit", str(path), "-n", NS, check=True)
    try:
        follower = subprocess.Popen([sys.executable, "-m", "generator", "logs", "follow", "-n", NS, "--follow"],
                                    env=cluster.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = cluster.cli("wait", "follow", "-n", NS, "--for", "Running", "--timeout", "120")
        assert running.returncode == 0, running.stderr
        assert job_state(cluster, "follow") in ("Running", "Succeeded")
        done = cluster.cli("wait", "follow", "-n", NS, "--for", "Succeeded", "--timeout", "300", timeout=400)
        assert done.returncode == 0, done.stderr
        out, err = follower.communicate(timeout=120)  # --follow ends when the job's containers do
        assert follower.returncode == 0, err
        assert "master-0 | epoch 12/12: test accuracy" in out
        assert out.index("epoch 1/12") < out.index("epoch 12/12")
    finally:
        delete_job(cluster, "follow")


# --- failures ----------------------------------------------------------------------------------
def _run_locally_and_kill_worker(path: Path, env: dict, run_dir: Path, first: str = "master-0",
                                 second: str = "RANK=1") -> tuple[int, str]:
    """`generator run` of the same job, with Worker 0 (the replica whose env holds `second`) killed
    by SIGKILL once `first` trains."""
    proc = subprocess.Popen([sys.executable, "-m", "generator", "run", str(path), "--run-dir", str(run_dir)], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    killed = False
    for line in proc.stdout:
        lines.append(line)
        if not killed and line.startswith(first) and "epoch 1 step" in line:
            worker = _local_replica(proc.pid, second)
            os.killpg(worker, signal.SIGKILL)
            killed = True
    assert killed, "".join(lines)
    return proc.wait(timeout=60), "".join(lines)


def _local_replica(parent: int, variable: str) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and variable.encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no replica with {variable} under pid {parent}")


@pytest.mark.timeout(900)  # the job on the node, then the same job under `generator run`
@pytest.mark.parametrize("policy", ["OnFailure", "ExitCode"])
def test_a_killed_worker_ends_as_generator_run_ends_it(cluster, tmp_path, policy):
    name = f"kill-{policy.lower()}"
    path = values(cluster, tmp_path, name, "--workers", "1", "--restart-policy", policy, "--output-size", "1Gi",
                  *DIGITS, "--arg=--epochs=6")  # the kill comes in epoch 1: five more to resume into
    cluster.cli("submit", str(path), "-n", NS, check=True)
    try:
        wait_for(lambda: "epoch 1 step" in _safe_log(cluster, f"{name}-master-0"), 180, "the master to train")
        kill(cluster, pods(cluster, name)[f"{name}-worker-0"])
        outcome = wait_for(lambda: job_state(cluster, name) in ("Succeeded", "Failed") and job_state(cluster, name),
                           400, f"{name} to finish")
        worker = pods(cluster, name).get(f"{name}-worker-0")
    finally:
        delete_job(cluster, name)
    code, local = _run_locally_and_kill_worker(path, {**cluster.env, "PYTHONPATH": str(ROOT)}, tmp_path / "run")
    assert ("Succeeded" if code == 0 else "Failed") == outcome, local
    assert outcome == "Succeeded"
    if policy == "OnFailure":  # the kubelet restarted the container in its pod, as the runner restarts the process
        assert worker.status.container_statuses[0].restart_count >= 1
        assert "worker-0" in local and "restartPolicy OnFailure" in local
    else:  # the kill (137) and the Master leaving its broken group (200) are both retryable under ExitCode
        assert "master-0 | exited with code 200; restarting (restartPolicy ExitCode" in local


@pytest.mark.timeout(900)
def test_a_killed_trainjob_node_ends_as_generator_run_ends_it(cluster, tmp_path):
    """The same kill through the real Trainer and JobSet and under `generator run --target v2`:
    runPolicy.backoffLimit 1 is one restart of the whole set (the node Job's backoffLimit 0), so
    both restart every node once, resume from the checkpoint on the shared claim and succeed with
    the same accuracies."""
    name = "kill-v2"
    path = values(cluster, tmp_path, name, "--target", "v2", "--workers", "1", "--output-size", "1Gi",
                  "--backoff-limit", "1", *DIGITS, "--arg=--epochs=6", "--arg=--seed=5")
    cluster.cli("submit", str(path), "-n", NS, check=True)
    jobset = "jobset.sigs.k8s.io/jobset-name"
    try:
        def node(index: str):
            found = [p for p in cluster.core().list_namespaced_pod(NS, label_selector=f"{jobset}={name}").items
                     if p.metadata.labels.get("batch.kubernetes.io/job-completion-index") == index
                     and p.status.phase == "Running"]
            return found[0] if found else None

        wait_for(lambda: node("0") and "epoch 1 step" in _safe_log(cluster, node("0").metadata.name, "node"), 180,
                 "node 0 to train")
        kill(cluster, node("1"))
        outcome = wait_for(lambda: job_state(cluster, name) in ("Complete", "Failed") and job_state(cluster, name),
                           400, f"{name} to finish")
        from generator.controlplane import build

        restarts = subprocess.run([str(build.binary("kubectl")), "get", "jobset", name, "-n", NS, "-o",
                                   "jsonpath={.status.restarts}"], env=cluster.env, capture_output=True, text=True)
        remote = json.loads((cluster.claim_folder(f"{name}-output", NS) / "metrics.json").read_text())
    finally:
        delete_job(cluster, name)
    code, local = _run_locally_and_kill_worker(path, {**cluster.env, "PYTHONPATH": str(ROOT)}, tmp_path / "run",
                                               first="node-0-0", second="PET_NODE_RANK=1")
    assert ("Complete" if code == 0 else "Failed") == outcome == "Complete", local
    assert restarts.stdout == "1"  # JobSet restarted every node once
    assert "the node Job failed, so every node restarts (JobSet restart 1 of 1)" in local
    mine = json.loads(next((tmp_path / "run").rglob("metrics.json")).read_text())
    assert mine["epoch_accuracies"] == remote["epoch_accuracies"]


def test_a_job_asking_for_gpus_the_node_lacks_stays_pending_with_the_schedulers_event(cluster, tmp_path):
    """The node offers the GPUs `cluster up --gpus` gave it (none on the shared cluster)."""
    gpu = "nvidia.com/gpu"
    (node,) = cluster.core().list_node().items
    offered = node.status.allocatable.get(gpu)
    asked = int(offered or 0) + 1
    path = values(cluster, tmp_path, "greedy", "--workers", "1", "--gpus", str(asked), *DIGITS)
    cluster.cli("submit", str(path), "-n", NS, check=True)
    try:
        found = wait_for(lambda: [e for e in events(cluster, "greedy-master-0") if e.reason == "FailedScheduling"], 60,
                         "the scheduler's FailedScheduling event")
        assert found[0].source.component == "default-scheduler" or found[0].reporting_component == "default-scheduler"
        assert f"Insufficient {gpu}" in found[0].message
        assert {p.status.phase for p in pods(cluster, "greedy").values()} == {"Pending"}
        assert job_state(cluster, "greedy") == "Created"
        # diagnose reads the same from the real scheduler and names the value to change; what the
        # nodes offer in all only where a node offers the resource at all.
        proc = cluster.cli("diagnose", "greedy", "-n", NS, "--format", "json")
        assert proc.returncode == 1, proc.stderr
        top = json.loads(proc.stdout)[0]
        assert (top["severity"], top["reason"]) == ("error", f"Insufficient {gpu}")
        assert top["object"] == "Pod/greedy-master-0 (and 1 more: greedy-worker-0)"
        have = f"; the nodes offer {offered} in all" if offered is not None else ""
        assert top["fix"] == (f"lower `resources.gpus` (each pod asks for {asked}{have}), or add nodes with {gpu}; "
                              "`gpuResourceName` must be the resource your GPU nodes offer")
    finally:
        delete_job(cluster, "greedy")


def test_diagnose_names_a_missing_claim_and_a_failed_replica_with_its_log(cluster, tmp_path):
    path = values(cluster, tmp_path, "claimless", "--workers", "0", "--output-pvc", "no-such-claim", *DIGITS)
    cluster.cli("submit", str(path), "-n", NS, check=True)
    broken = values(cluster, tmp_path, "broken", "--workers", "0", "--restart-policy", "Never", *DIGITS,
                    "--arg=--no-such-flag")
    cluster.cli("submit", str(broken), "-n", NS, check=True)
    try:
        wait_for(lambda: [e for e in events(cluster, "claimless-master-0") if e.reason == "FailedScheduling"], 60,
                 "the scheduler to refuse the pod")
        proc = cluster.cli("diagnose", "claimless", "-n", NS)
        assert proc.returncode == 1, proc.stderr
        assert "[error] PersistentVolumeClaim/no-such-claim: ClaimNotFound" in proc.stdout
        assert "`output.existingClaim`" in proc.stdout

        wait_for(lambda: job_state(cluster, "broken") == "Failed", 180, "the broken job to fail")
        proc = cluster.cli("diagnose", "broken", "-n", NS, "--format", "json")
        assert proc.returncode == 1, proc.stderr
        failed = next(f for f in json.loads(proc.stdout) if f["object"] == "Pod/broken-master-0")
        assert failed["reason"] == "Error"
        assert failed["message"].startswith("container pytorch exited with code 2 (Error); its last log lines:")
        assert "--no-such-flag" in failed["message"]  # the trainer's own complaint, from the log
        status = cluster.cli("status", "broken", "-n", NS)
        assert "diagnose: error: Pod/broken-master-0: Error: container pytorch exited with code 2" in status.stdout
    finally:
        delete_job(cluster, "claimless")
        delete_job(cluster, "broken")


# --- elastic jobs ------------------------------------------------------------------------------
@pytest.mark.timeout(600)  # torch's rendezvous may wait out its 60 s store timeout once before it settles
def test_an_elastic_job_scales_within_its_bounds(cluster, tmp_path):
    from kubernetes import client

    path = values(cluster, tmp_path, "elastic", "--workers", "1", "--elastic", "1:3", "--nproc-per-node", "1",
                  "--output-size", "1Gi", *DIGITS, "--arg=--epochs=1000")  # still training when it scales
    cluster.cli("submit", str(path), "-n", NS, check=True)
    try:
        wait_for(lambda: any("epoch 1 step" in _safe_log(cluster, p) for p in pods(cluster, "elastic")), 240,
                 "the elastic job to train")
        client.CustomObjectsApi(cluster.api()).patch_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "pytorchjobs", "elastic",
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}})
        wait_for(lambda: "elastic-worker-1" in pods(cluster, "elastic"), 60, "the operator to add worker 1")
        # The agents see the third node, stop their workers at a checkpoint and meet again with it
        # (torch's rendezvous may take a container restart to settle; OnFailure allows it).
        wait_for(lambda: any("world size 3 (gloo" in _safe_log(cluster, p) + _previous(cluster, p)
                             for p in pods(cluster, "elastic")), 420,
                 "training to go on with three nodes", interval=3)
        assert any("stopping at epoch" in _safe_log(cluster, p) + _previous(cluster, p) for p in pods(cluster, "elastic"))
    finally:
        delete_job(cluster, "elastic")


# Worker-only, elastic: worker-0 ends at once, worker-1 (rank 0, say) still writes its outputs.
EARLY = 'case "$POD" in *worker-1) sleep 20; echo "worker-1 wrote its outputs";; esac; echo "$POD done"'


def succeeded_at(cluster, name: str):
    """When the operator declared the job Succeeded, by the condition it wrote."""
    import datetime

    from kubernetes import client

    def condition():
        job = client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object("kubeflow.org", "v1", NS,
                                                                                   "pytorchjobs", name)
        return next((c for c in (job.get("status") or {}).get("conditions") or []
                     if c["type"] == "Succeeded" and c["status"] == "True"), None)

    when = wait_for(condition, 300, f"{name} to succeed")["lastTransitionTime"]
    return datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))


def logged_at(cluster, pod: str, text: str):
    """When a pod's log line holding `text` was written, by the node's timestamps."""
    import datetime

    for line in log_of(cluster, pod, "pytorch", timestamps=True).splitlines():
        stamp, _, rest = line.partition(" ")
        if text in rest:
            return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return None


@pytest.mark.timeout(600)
def test_an_elastic_job_can_succeed_before_rank_0s_outputs_unless_its_ranks_wait_for_them(cluster, tmp_path):
    """The operator (v1.9.4) declares an elastic Worker-only job Succeeded when one Worker succeeds,
    whichever pod holds rank 0: a pod that ends at once makes the job Succeeded while another still
    works (`validate` warns of it, and `generator run` decides the same). The project's trainer makes
    every rank wait for rank 0's outputs, so its elastic job is Succeeded only once metrics.json is written."""
    import datetime

    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "early"}, "spec": {
        "elasticPolicy": {"minReplicas": 2, "maxReplicas": 2, "rdzvBackend": "c10d"},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "Never", "template": {"spec": {"containers": [{
            # our own code, run with the trainer image's sh
            "name": "pytorch", "image": trainer_image(), "command": ["sh", "-c", EARLY],
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]}}}}}}
    path = tmp_path / "early.yaml"
    path.write_text(json.dumps(manifest))
    assert "warning: spec.elasticPolicy:" in cluster.cli("validate", str(path), check=True).stderr
    cluster.cli("submit", str(path), "-n", NS, check=True)
    try:
        declared = succeeded_at(cluster, "early")
        written = wait_for(lambda: logged_at(cluster, "early-worker-1", "wrote its outputs"), 120, "worker-1's outputs")
        assert (written - declared).total_seconds() >= 10, (declared, written)  # it sleeps 20 s first
    finally:
        delete_job(cluster, "early")
    ran = cluster.cli("run", str(path), "--run-dir", str(tmp_path / "run"))
    assert ran.returncode == 0 and "job succeeded: a Worker succeeded (elastic)" in ran.stderr, ran.stderr

    ours = values(cluster, tmp_path, "late", "--workers", "1", "--elastic", "1:2", "--nproc-per-node", "1", *DIGITS,
                  "--arg=--epochs=1")
    assert "warning" not in cluster.cli("validate", str(ours), check=True).stderr
    cluster.cli("submit", str(ours), "-n", NS, check=True)
    try:
        declared = succeeded_at(cluster, "late")
        written = [t for t in (logged_at(cluster, p, "metrics.json") for p in pods(cluster, "late")) if t]
        # rank 0's line, before the success (whose time the API server keeps to the second)
        assert len(written) == 1 and written[0] < declared + datetime.timedelta(seconds=1), (written, declared)
    finally:
        delete_job(cluster, "late")


# --- single pods -----------------------------------------------------------------------------
# alpine's image, which the operator's init containers run: the registry on this machine holds it
# (Debian's busybox with its applets, dash as sh).
SH = "alpine:3.10"


def _pod(cluster, name: str, spec: dict) -> None:
    cluster.core().create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def _gone(cluster, name: str) -> None:
    from kubernetes import client

    try:
        cluster.core().delete_namespaced_pod(name, NS, grace_period_seconds=1)
    except client.ApiException:
        pass


def test_a_pod_gets_its_env_volumes_and_expansion_as_kubernetes_gives_them(cluster):
    core = cluster.core()
    core.create_namespaced_secret(NS, {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "settings"}, "data": {"mode": "fast", "LEVEL": "debug"}})
    script = ('echo "A=$A B=$B C=$C"; echo "token=$TOKEN mode=$MODE level=$LEVEL"; '
              'echo "pod=$POD ns=$NS node=$NODE ip=$IP"; echo "arg=$0"; cat /tmp/config/mode; echo; '
              'echo hi > /var/run/scratch/file; cat /var/run/scratch/file; hostname; hostname -i')
    _pod(cluster, "env-check", {"restartPolicy": "Never", "containers": [{
        "name": "sh", "image": SH, "command": ["sh", "-c", script, "$(A)-arg"],
        "env": [{"name": "A", "value": "one"}, {"name": "B", "value": "$(A)-two"}, {"name": "C", "value": "$$(A)"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "envFrom": [{"configMapRef": {"name": "settings"}}],
        "volumeMounts": [{"name": "config", "mountPath": "/tmp/config"}, {"name": "scratch", "mountPath": "/var/run/scratch"}]}],
        "volumes": [{"name": "config", "configMap": {"name": "settings"}}, {"name": "scratch", "emptyDir": {}}]})
    try:
        wait_for(lambda: core.read_namespaced_pod("env-check", NS).status.phase in ("Succeeded", "Failed"), 120,
                 "env-check to end")
        (node,) = core.list_node().items
        ip = core.read_namespaced_pod("env-check", NS).status.pod_ip
        assert on_the_bridge(cluster, ip)
        assert [line.strip() for line in log_of(cluster, "env-check").splitlines()] == [
            "A=one B=one-two C=$(A)", "token=s3cret mode=fast level=debug",
            f"pod=env-check ns={NS} node={node.metadata.name} ip={ip}", "arg=one-arg", "fast", "hi",
            "env-check", ip]
    finally:
        _gone(cluster, "env-check")


def test_an_exec_probe_runs_inside_the_container_with_its_env(cluster):
    """The probe sees the container's private /var/run and its env, not this machine's."""
    core = cluster.core()
    _pod(cluster, "exec-probe", {"containers": [{
        "name": "sh", "image": SH, "command": ["sh", "-c", "echo up > /var/run/state/ready; sleep 300"],
        "env": [{"name": "MODE", "value": "serving"}],
        "readinessProbe": {"exec": {"command": ["sh", "-c", 'test -f /var/run/state/ready && test "$MODE" = serving']},
                           "periodSeconds": 1},
        "volumeMounts": [{"name": "state", "mountPath": "/var/run/state"}]}],
        "volumes": [{"name": "state", "emptyDir": {}}]})
    try:
        wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in
                             core.read_namespaced_pod("exec-probe", NS).status.conditions or []), 120,
                 "the exec readiness probe to pass")
        assert not Path("/var/run/state/ready").exists()  # the file is the container's alone
    finally:
        _gone(cluster, "exec-probe")


def test_restarts_back_off_and_the_previous_log_is_kept(cluster):
    from kubernetes import client

    core = cluster.core()
    _pod(cluster, "crasher", {"restartPolicy": "OnFailure", "containers": [{
        "name": "sh", "image": SH, "command": ["sh", "-c", "echo run; exit 3"]}]})
    # The first restart comes at once; the second 10 s after the run before it ended, the third 20 s
    # after: read from each run's start and end, which the node reports (to the second) in the
    # container's state and last state; a run may end unseen between two reads, so each is placed by
    # the restart count beside it. While a back-off lasts the waiting state (CrashLoopBackOff) names
    # it, where the node reports one: the kubelet reports it only when it syncs the pod during it.
    runs: dict[int, tuple] = {}  # run (0: the first) -> (started, finished)
    said: dict[int, set[str]] = {}  # restartCount -> the back-offs its waiting states named
    # The previous run's log, read once a restart has come: the real kubelet keeps one dead container
    # per container and, reporting the last run terminated, takes "previous" for the run before it,
    # which its container GC (each minute) removes; so read soon after each restart, as a user would.
    previous: set[str] = set()

    def third_restart():
        pod = core.read_namespaced_pod("crasher", NS)
        if not pod.status.container_statuses:
            return None
        status = pod.status.container_statuses[0]
        count, waiting = status.restart_count, status.state.waiting
        if status.state.terminated:  # the latest run, ended (the real kubelet says so during its back-off)
            runs[count] = (status.state.terminated.started_at, status.state.terminated.finished_at)
        if status.last_state.terminated:  # the run that ended last while backing off, else the one before
            ended = status.last_state.terminated
            runs[count if waiting else count - 1] = (ended.started_at, ended.finished_at)
        if count >= 1:
            try:
                previous.add(log_of(cluster, "crasher", previous=True))
            except client.ApiException as exc:  # between two runs, on the node's word
                previous.add(f"{exc.status}: {exc.body}")
        if waiting and waiting.reason == "CrashLoopBackOff":
            said.setdefault(count, set()).add(waiting.message.partition(" restarting")[0])
            assert f" restarting failed container=sh pod=crasher_{NS}(" in waiting.message, waiting.message
        return (pod, status) if all(k in runs for k in (1, 2, 3)) else None

    try:
        pod, status = wait_for(third_restart, 120, "the third restart to end")
        # The first run ends at once; where it went unseen, the pod's start stands for its end.
        first_end = runs[0][1] if 0 in runs else pod.status.start_time
        gaps = [(runs[1][0] - first_end).total_seconds(), *((runs[k + 1][0] - runs[k][1]).total_seconds() for k in (1, 2))]
        assert gaps[0] < 10 <= gaps[1] < gaps[2] and gaps[2] >= 20, (gaps, runs)
        assert all(said[count] == {f"back-off {10 * 2 ** (count - 1)}s"} for count in said), said
        assert status.last_state.terminated.exit_code == 3 and status.last_state.terminated.reason == "Error"
        assert "run\n" in previous, previous
        assert any(e.reason == "BackOff" for e in events(cluster, "crasher"))
    finally:
        _gone(cluster, "crasher")


def test_deleting_a_pod_sends_sigterm_then_sigkill_after_its_grace_period(cluster):
    from kubernetes import client

    core = cluster.core()
    _pod(cluster, "stubborn", {"terminationGracePeriodSeconds": 3, "containers": [{
        "name": "sh", "image": SH, "command": ["sh", "-c", "trap 'echo got TERM' TERM; while :; do sleep 0.2; done"]}]})
    wait_for(lambda: core.read_namespaced_pod("stubborn", NS).status.phase == "Running", 120, "stubborn to run")
    pid = container_pid(core.read_namespaced_pod("stubborn", NS).status.container_statuses[0].container_id)
    started = time.monotonic()
    core.delete_namespaced_pod("stubborn", NS)
    # Read while the pod is still there, within its grace period: the shell's trap heard SIGTERM.
    wait_for(lambda: "got TERM" in _safe_log(cluster, "stubborn", "sh"), 3, "the container to log SIGTERM", interval=0.2)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("stubborn", NS)
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for(gone, 60, "the pod to be deleted")
    assert 3 <= time.monotonic() - started < 30  # the grace period was waited out, then SIGKILL
    assert not Path(f"/proc/{pid}").exists()


def test_the_trainer_as_its_containers_pid_1_ends_on_sigterm_while_it_waits_for_its_peers(cluster):
    """The trainer is PID 1 of its container, which hears only the signals it handles: SIGTERM
    from the host while rank 0 waits for a rank 1 that never comes ends it at once with 143, so a
    job deleted while it starts does not wait out its grace period."""
    core = cluster.core()
    port = 29500
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    _pod(cluster, "alone", {"restartPolicy": "Never", "containers": [{
        "name": "pytorch", "image": trainer_image(), "args": ["--dataset", "synthetic", "--rdzv-timeout", "600"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}}]})
    try:
        wait_for(lambda: core.read_namespaced_pod("alone", NS).status.phase == "Running", 120, "alone to run")
        pid = container_pid(core.read_namespaced_pod("alone", NS).status.container_statuses[0].container_id)
        wait_for(lambda: procfs.listening(pid, port), 120, f"rank 0 to listen on {port} in its pod")
        assert procfs.handles(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGTERM)

        def terminated():
            status = core.read_namespaced_pod("alone", NS).status.container_statuses[0]
            return status.state.terminated

        ended = wait_for(terminated, 60, "the trainer to end on SIGTERM")
        assert ended.exit_code == 143, ended
        assert _safe_log(cluster, "alone").splitlines()[-1] == ("trainer (rank 0): SIGTERM before training began; "
                                                                "exiting 143 with nothing to save")
    finally:
        _gone(cluster, "alone")
