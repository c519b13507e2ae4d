"""The process kubelet: the node of `generator cluster up --node process` (and where the real node
cannot run), on a cluster of this module's own. Jobs go through the real API server, scheduler and
operator, and train here as processes; what the node does is read back from the API server, the way
kubectl would see it. With the securityContext it enforces itself (a root user refused, another
pod's token hidden, probes run as the user, no helper of the node's run from a pod's PATH)."""
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
from tests.support import ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
DIGITS = ["--arg=--dataset=digits", "--arg=--threads=1"]


@pytest.fixture(scope="module")
def node_options() -> list[str]:
    # The process node's own module, on a cluster of its own (the shared one runs the node `cluster
    # up` chooses): a node offering one GPU for the scheduling tests, and Trainer for the TrainJob ones.
    return ["--node", "process", "--gpus", "1", "--trainer"]


def values(cluster, tmp_path: Path, name: str, *options: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    cluster.cli("values", "--name", name, "--cpu", "100m", "--memory", "256Mi", *options, "-o", str(path), check=True)
    return path


def pods(cluster, job: str, namespace: str = "default") -> dict:
    items = cluster.core().list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={job}").items
    return {p.metadata.name: p for p in items}


def ended_pods(cluster, job: str, namespace: str = "default") -> dict | None:
    """The job's pods once every one has ended, else None."""
    found = pods(cluster, job, namespace)
    return found if all(p.status.phase in ("Succeeded", "Failed") for p in found.values()) else None


def events(cluster, name: str, namespace: str = "default") -> list:
    return cluster.core().list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def job_state(cluster, name: str, namespace: str = "default") -> str:
    report = json.loads(cluster.cli("status", name, "-n", namespace, "--format", "json", check=True).stdout)
    return report["state"]


def delete_job(cluster, name: str) -> None:
    from kubernetes import client

    cluster.cli("delete", name, "-n", "default", check=True)
    try:
        cluster.core().delete_namespaced_persistent_volume_claim(f"{name}-output", "default")
    except client.ApiException as exc:
        assert exc.status == 404
    wait_for(lambda: not pods(cluster, name), 120, f"the pods of {name} to go")


def log_of(cluster, pod: str, container: str | None = None, namespace: str = "default", **options) -> str:
    return cluster.core().read_namespaced_pod_log(pod, namespace, container=container, **options) or ""


def pod_network(cluster) -> network.PodNetwork:
    return network.PodNetwork(**json.loads((cluster.dir / "state.json").read_text())["pod_network"])


def on_the_bridge(cluster, address: str) -> bool:
    import ipaddress

    net = pod_network(cluster)
    return ipaddress.ip_address(address) in net.subnet and address != net.gateway


def kill(pod) -> None:
    """SIGKILL to a container's processes, as the OOM killer or a node failure would end them."""
    pid = int(pod.status.container_statuses[0].container_id.removeprefix("process://"))
    os.killpg(pid, signal.SIGKILL)


# --- the node --------------------------------------------------------------------------------
def test_the_node_offers_this_machine_and_the_gpus_asked_for(cluster):
    (node,) = cluster.core().list_node().items
    memory_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:"))
    assert node.status.capacity["cpu"] == str(os.cpu_count())
    assert node.status.capacity["memory"] == f"{memory_kib}Ki"
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    assert {(c.type, c.status) for c in node.status.conditions} >= {("Ready", "True"), ("MemoryPressure", "False")}
    # The node is the bridge's gateway, and its pods take their IPs from the bridge's /24.
    assert [(a.type, a.address) for a in node.status.addresses][0] == ("InternalIP", pod_network(cluster).gateway)
    assert node.spec.pod_cidr == pod_network(cluster).cidr
    assert not node.spec.taints  # the node lifecycle controller found it healthy


def test_the_heartbeat_lease_is_renewed(cluster):
    from kubernetes import client

    leases = client.CoordinationV1Api(cluster.api())
    (node,) = cluster.core().list_node().items
    first = leases.read_namespaced_lease(node.metadata.name, "kube-node-lease").spec.renew_time
    wait_for(lambda: leases.read_namespaced_lease(node.metadata.name, "kube-node-lease").spec.renew_time > first, 30,
             "the node's Lease to be renewed")


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


# --- the demo job ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(cluster, tmp_path_factory):
    path = values(cluster, tmp_path_factory.mktemp("demo"), "demo", "--workers", "2", "--output-size", "1Gi",
                  *DIGITS, "--arg=--epochs=4")
    proc = cluster.cli("submit", str(path), "-n", "default", "--wait", "--timeout", "600", timeout=700)
    yield proc
    delete_job(cluster, "demo")


def test_the_demo_job_trains_and_succeeds_through_the_real_operator(cluster, demo):
    assert demo.returncode == 0, demo.stderr
    assert "pytorchjob demo succeeded" in demo.stdout + demo.stderr
    folder = cluster.claim_folder("demo-output")
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
    for name, pod in workers.items():
        (init,) = pod.status.init_container_statuses
        assert (init.name, init.state.terminated.exit_code, init.state.terminated.reason) == ("init-pytorch", 0, "Completed")
        # The Master's Service resolved to the Master pod's own IP.
        master_ip = job["demo-master-0"].status.pod_ip
        assert f"Name:      demo-master-0\nAddress:   {master_ip}" in log_of(cluster, name, "init-pytorch")


def test_generator_logs_reads_the_job_through_the_kubelet(cluster, demo):
    proc = cluster.cli("logs", "demo", "-n", "default", "--replica", "master-0", check=True)
    assert "epoch 4/4: test accuracy" in proc.stdout
    tail = log_of(cluster, "demo-master-0", "pytorch", tail_lines=1, timestamps=True)
    stamp, _, line = tail.partition(" ")
    assert stamp.startswith("20") and stamp.endswith("Z") and line.startswith("wrote ")


# --- a job followed while it runs ------------------------------------------------------------
def test_status_logs_follow_and_wait_on_a_running_job(cluster, tmp_path):
    # Long enough to be running when `wait --for Running` asks, short enough not to keep the suite waiting.
    path = values(cluster, tmp_path, "follow", "--workers", "1", *DIGITS, "--arg=--epochs=12")
    cluster.cli("submit", str(path), "-n", "default", check=True)
    try:
        follower = subprocess.Popen([sys.executable, "-m", "generator", "logs", "follow", "-n", "default", "--follow"],
                                    env=cluster.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = cluster.cli("wait", "follow", "-n", "default", "--for", "Running", "--timeout", "120")
        assert running.returncode == 0, running.stderr
        assert job_state(cluster, "follow") in ("Running", "Succeeded")
        done = cluster.cli("wait", "follow", "-n", "default", "--for", "Succeeded", "--timeout", "300", timeout=400)
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


@pytest.mark.parametrize("policy", ["OnFailure", "ExitCode"])
def test_a_killed_worker_ends_as_generator_run_ends_it(cluster, tmp_path, policy):
    name = f"kill-{policy.lower()}"
    path = values(cluster, tmp_path, name, "--workers", "1", "--restart-policy", policy, "--output-size", "1Gi",
                  *DIGITS, "--arg=--epochs=6")  # the kill comes in epoch 1: five more to resume into
    cluster.cli("submit", str(path), "-n", "default", check=True)
    try:
        wait_for(lambda: "epoch 1 step" in _safe_log(cluster, f"{name}-master-0"), 180, "the master to train")
        kill(pods(cluster, name)[f"{name}-worker-0"])
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


def test_a_killed_trainjob_node_ends_as_generator_run_ends_it(cluster, tmp_path):
    """The same kill through the real Trainer and JobSet and under `generator run --target v2`:
    runPolicy.backoffLimit 1 is one restart of the whole set (the node Job's backoffLimit 0), so
    both restart every node once, resume from the checkpoint on the shared claim and succeed with
    the same accuracies."""
    name = "kill-v2"
    path = values(cluster, tmp_path, name, "--target", "v2", "--workers", "1", "--output-size", "1Gi",
                  "--backoff-limit", "1", *DIGITS, "--arg=--epochs=6", "--arg=--seed=5")
    cluster.cli("submit", str(path), "-n", "default", check=True)
    jobset = "jobset.sigs.k8s.io/jobset-name"
    try:
        def node(index: str):
            found = [p for p in cluster.core().list_namespaced_pod("default", label_selector=f"{jobset}={name}").items
                     if p.metadata.labels.get("batch.kubernetes.io/job-completion-index") == index
                     and p.status.phase == "Running"]
            return found[0] if found else None

        wait_for(lambda: node("0") and "epoch 1 step" in _safe_log(cluster, node("0").metadata.name, "node"), 180,
                 "node 0 to train")
        kill(node("1"))
        outcome = wait_for(lambda: job_state(cluster, name) in ("Complete", "Failed") and job_state(cluster, name),
                           400, f"{name} to finish")
        from generator.controlplane import build

        restarts = subprocess.run([str(build.binary("kubectl")), "get", "jobset", name, "-o",
                                   "jsonpath={.status.restarts}"], env=cluster.env, capture_output=True, text=True)
        remote = json.loads((cluster.claim_folder(f"{name}-output") / "metrics.json").read_text())
    finally:
        delete_job(cluster, name)
    code, local = _run_locally_and_kill_worker(path, {**cluster.env, "PYTHONPATH": str(ROOT)}, tmp_path / "run",
                                               first="node-0-0", second="PET_NODE_RANK=1")
    assert ("Complete" if code == 0 else "Failed") == outcome == "Complete", local
    assert restarts.stdout == "1"  # JobSet restarted every node once
    assert "the node Job failed, so every node restarts (JobSet restart 1 of 1)" in local
    mine = json.loads(next((tmp_path / "run").rglob("metrics.json")).read_text())
    assert mine["epoch_accuracies"] == remote["epoch_accuracies"]


def _previous(cluster, pod: str) -> str:
    try:
        return log_of(cluster, pod, "pytorch", previous=True)
    except Exception:  # no earlier run
        return ""


def _safe_log(cluster, pod: str, container: str = "pytorch") -> str:
    try:
        return log_of(cluster, pod, container)
    except Exception:
        return ""


def test_an_unschedulable_job_stays_pending_with_the_schedulers_event(cluster, tmp_path):
    path = values(cluster, tmp_path, "greedy", "--workers", "1", "--gpus", "2", *DIGITS)
    cluster.cli("submit", str(path), "-n", "default", check=True)
    try:
        found = wait_for(lambda: [e for e in events(cluster, "greedy-master-0") if e.reason == "FailedScheduling"], 60,
                         "the scheduler's FailedScheduling event")
        assert found[0].source.component == "default-scheduler" or found[0].reporting_component == "default-scheduler"
        assert "Insufficient nvidia.com/gpu" in found[0].message
        assert {p.status.phase for p in pods(cluster, "greedy").values()} == {"Pending"}
        assert job_state(cluster, "greedy") == "Created"
        # diagnose reads the same from the real scheduler and names the value to change.
        proc = cluster.cli("diagnose", "greedy", "-n", "default", "--format", "json")
        assert proc.returncode == 1, proc.stderr
        top = json.loads(proc.stdout)[0]
        assert (top["severity"], top["reason"]) == ("error", "Insufficient nvidia.com/gpu")
        assert top["object"] == "Pod/greedy-master-0 (and 1 more: greedy-worker-0)"
        assert "lower `resources.gpus` (each pod asks for 2; the nodes offer 1 in all)" in top["fix"]
    finally:
        delete_job(cluster, "greedy")


def test_diagnose_names_a_missing_claim_and_a_failed_replica_with_its_log(cluster, tmp_path):
    path = values(cluster, tmp_path, "claimless", "--workers", "0", "--output-pvc", "no-such-claim", *DIGITS)
    cluster.cli("submit", str(path), "-n", "default", check=True)
    broken = values(cluster, tmp_path, "broken", "--workers", "0", "--restart-policy", "Never", *DIGITS,
                    "--arg=--no-such-flag")
    cluster.cli("submit", str(broken), "-n", "default", check=True)
    try:
        wait_for(lambda: [e for e in events(cluster, "claimless-master-0") if e.reason == "FailedScheduling"], 60,
                 "the scheduler to refuse the pod")
        proc = cluster.cli("diagnose", "claimless", "-n", "default")
        assert proc.returncode == 1, proc.stderr
        assert "[error] PersistentVolumeClaim/no-such-claim: ClaimNotFound" in proc.stdout
        assert "`output.existingClaim`" in proc.stdout

        wait_for(lambda: job_state(cluster, "broken") == "Failed", 180, "the broken job to fail")
        proc = cluster.cli("diagnose", "broken", "-n", "default", "--format", "json")
        assert proc.returncode == 1, proc.stderr
        failed = next(f for f in json.loads(proc.stdout) if f["object"] == "Pod/broken-master-0")
        assert failed["reason"] == "Error"
        assert failed["message"].startswith("container pytorch exited with code 2 (Error); its last log lines:")
        assert "--no-such-flag" in failed["message"]  # the trainer's own complaint, from the log
        status = cluster.cli("status", "broken", "-n", "default")
        assert "diagnose: error: Pod/broken-master-0: Error: container pytorch exited with code 2" in status.stdout
    finally:
        delete_job(cluster, "claimless")
        delete_job(cluster, "broken")


@pytest.mark.timeout(600)  # torch's rendezvous may wait out its 60 s store timeout once before it settles
def test_an_elastic_job_scales_within_its_bounds(cluster, tmp_path):
    from kubernetes import client

    path = values(cluster, tmp_path, "elastic", "--workers", "1", "--elastic", "1:3", "--nproc-per-node", "1",
                  "--output-size", "1Gi", *DIGITS, "--arg=--epochs=1000")  # still training when it scales
    cluster.cli("submit", str(path), "-n", "default", check=True)
    try:
        wait_for(lambda: any("epoch 1 step" in _safe_log(cluster, p) for p in pods(cluster, "elastic")), 240,
                 "the elastic job to train")
        client.CustomObjectsApi(cluster.api()).patch_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "elastic",
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
        job = client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object("kubeflow.org", "v1", "default",
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

    from generator.job import defaults

    trainer = defaults.chart_defaults()["image"]["repository"]  # our own code, run with the trainer image's sh
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "early"}, "spec": {
        "elasticPolicy": {"minReplicas": 2, "maxReplicas": 2, "rdzvBackend": "c10d"},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "Never", "template": {"spec": {"containers": [{
            "name": "pytorch", "image": f"{trainer}:0.1.0", "command": ["sh", "-c", EARLY],
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]}}}}}}
    path = tmp_path / "early.yaml"
    path.write_text(json.dumps(manifest))
    assert "warning: spec.elasticPolicy:" in cluster.cli("validate", str(path), check=True).stderr
    cluster.cli("submit", str(path), "-n", "default", check=True)
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
    cluster.cli("submit", str(ours), "-n", "default", check=True)
    try:
        declared = succeeded_at(cluster, "late")
        written = [t for t in (logged_at(cluster, p, "metrics.json") for p in pods(cluster, "late")) if t]
        # rank 0's line, before the success (whose time the API server keeps to the second)
        assert len(written) == 1 and written[0] < declared + datetime.timedelta(seconds=1), (written, declared)
    finally:
        delete_job(cluster, "late")


# --- single pods -----------------------------------------------------------------------------
def _pod(cluster, name: str, spec: dict) -> None:
    cluster.core().create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                                     "spec": spec})


def _gone(cluster, name: str) -> None:
    from kubernetes import client

    try:
        cluster.core().delete_namespaced_pod(name, "default", grace_period_seconds=1)
    except client.ApiException:
        pass


def test_an_unknown_image_fails_like_an_image_pull(cluster):
    _pod(cluster, "unknown-image", {"containers": [{"name": "app", "image": "example.com/team/app:1.0"}]})
    try:
        state = wait_for(lambda: (cluster.core().read_namespaced_pod("unknown-image", "default").status.container_statuses
                                  or [None])[0], 60, "a container status")
        waiting = wait_for(lambda: cluster.core().read_namespaced_pod("unknown-image", "default")
                           .status.container_statuses[0].state.waiting, 60, "the waiting state")
        assert state.name == "app" and waiting.reason in ("ErrImagePull", "ImagePullBackOff")
        assert 'image "example.com/team/app:1.0" cannot run on this machine' in waiting.message
        assert "ghcr.io/pytorchjob-kit/trainer" in waiting.message and "--image example.com/team/app=" in waiting.message
        failed = [e for e in events(cluster, "unknown-image") if e.reason == "Failed"]
        assert any("Failed to pull image" in e.message for e in failed)
    finally:
        _gone(cluster, "unknown-image")


def test_a_pod_gets_its_env_volumes_and_expansion_as_kubernetes_gives_them(cluster):
    core = cluster.core()
    core.create_namespaced_secret("default", {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "settings"},
                                                  "data": {"mode": "fast", "LEVEL": "debug"}})
    script = ('echo "A=$A B=$B C=$C"; echo "token=$TOKEN mode=$MODE level=$LEVEL"; '
              'echo "pod=$POD ns=$NS node=$NODE ip=$IP"; echo "arg=$0"; cat /tmp/config/mode; echo; '
              'echo hi > /var/run/scratch/file; cat /var/run/scratch/file; hostname; hostname -i')
    _pod(cluster, "env-check", {"restartPolicy": "Never", "containers": [{
        "name": "sh", "image": "busybox:1.36", "command": ["sh", "-c", script, "$(A)-arg"],
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
        wait_for(lambda: core.read_namespaced_pod("env-check", "default").status.phase == "Succeeded", 60, "env-check to end")
        (node,) = core.list_node().items
        ip = core.read_namespaced_pod("env-check", "default").status.pod_ip
        assert on_the_bridge(cluster, ip)
        assert [line.strip() for line in log_of(cluster, "env-check").splitlines()] == [
            "A=one B=one-two C=$(A)", "token=s3cret mode=fast level=debug",
            f"pod=env-check ns=default node={node.metadata.name} ip={ip}", "arg=one-arg", "fast", "hi",
            "env-check", ip]
    finally:
        _gone(cluster, "env-check")


def test_an_exec_probe_runs_inside_the_container_with_its_env(cluster):
    """The probe sees the container's private /var/run and its env, not this machine's."""
    core = cluster.core()
    _pod(cluster, "exec-probe", {"containers": [{
        "name": "sh", "image": "busybox:1.36", "command": ["sh", "-c", "echo up > /var/run/state/ready; sleep 300"],
        "env": [{"name": "MODE", "value": "serving"}],
        "readinessProbe": {"exec": {"command": ["sh", "-c", 'test -f /var/run/state/ready && test "$MODE" = serving']},
                           "periodSeconds": 1},
        "volumeMounts": [{"name": "state", "mountPath": "/var/run/state"}]}],
        "volumes": [{"name": "state", "emptyDir": {}}]})
    try:
        wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in
                             core.read_namespaced_pod("exec-probe", "default").status.conditions or []), 60,
                 "the exec readiness probe to pass")
        assert not Path("/var/run/state/ready").exists()  # the file is the container's alone
    finally:
        _gone(cluster, "exec-probe")


def test_a_host_path_is_refused_by_pod_security_and_outside_the_volumes_folder_by_the_node(cluster):
    from kubernetes import client

    core = cluster.core()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "host-etc"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "sh", "image": "busybox:1.36", "command": ["cat", "/host/shadow"],
                                                  "volumeMounts": [{"name": "etc", "mountPath": "/host"}]}],
        "volumes": [{"name": "etc", "hostPath": {"path": "/etc"}}]}}
    # `cluster up` enforces PodSecurity baseline wherever a namespace sets no level of its own.
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod("default", pod)
    assert refused.value.status == 403
    assert 'violates PodSecurity "baseline:latest": hostPath volumes' in json.loads(refused.value.body)["message"]
    # A namespace an admin opened up still gets nothing outside the cluster's volumes folder from the node.
    core.create_namespace({"metadata": {"name": "host-paths",
                                        "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    try:
        core.create_namespaced_pod("host-paths", pod)
        failed = wait_for(lambda: [e for e in events(cluster, "host-etc", "host-paths") if e.reason == "FailedMount"],
                          60, "the FailedMount event")
        assert 'hostPath volume "etc": "/etc" is outside' in failed[0].message
        assert f"{cluster.dir / 'volumes'}, the only host folder this node mounts" in failed[0].message
        assert core.read_namespaced_pod("host-etc", "host-paths").status.phase == "Pending"
    finally:
        core.delete_namespace("host-paths")


def test_restarts_back_off_and_the_previous_log_is_kept(cluster):
    _pod(cluster, "crasher", {"restartPolicy": "OnFailure", "containers": [{
        "name": "sh", "image": "busybox", "command": ["sh", "-c", "echo run; exit 3"]}]})
    # The first restart comes at once; the second after 10 s and the third after 20 s, each back-off
    # named in the waiting state while it lasts (the delays themselves: test_kubelet_backoff.py).
    said: dict[int, set[str]] = {}  # restartCount -> the back-offs its waiting states named

    def second_back_off():
        statuses = cluster.core().read_namespaced_pod("crasher", "default").status.container_statuses
        waiting = statuses and statuses[0].state.waiting
        if not waiting or waiting.reason != "CrashLoopBackOff":
            return None
        said.setdefault(statuses[0].restart_count, set()).add(waiting.message.partition(" restarting")[0])
        assert " restarting failed container=sh pod=crasher_default(" in waiting.message, waiting.message
        return statuses[0] if statuses[0].restart_count >= 2 else None

    try:
        status = wait_for(second_back_off, 90, "the second back-off")
        assert said == {1: {"back-off 10s"}, 2: {"back-off 20s"}}, said
        assert status.last_state.terminated.exit_code == 3 and status.last_state.terminated.reason == "Error"
        assert log_of(cluster, "crasher", previous=True) == "run\n"
        assert any(e.reason == "BackOff" for e in events(cluster, "crasher"))
    finally:
        _gone(cluster, "crasher")


def test_deleting_a_pod_sends_sigterm_then_sigkill_after_its_grace_period(cluster):
    _pod(cluster, "stubborn", {"terminationGracePeriodSeconds": 3, "containers": [{
        "name": "sh", "image": "busybox", "command": ["sh", "-c", "trap 'echo got TERM' TERM; while :; do sleep 0.2; done"]}]})
    wait_for(lambda: cluster.core().read_namespaced_pod("stubborn", "default").status.phase == "Running", 60, "stubborn to run")
    pid = int(cluster.core().read_namespaced_pod("stubborn", "default").status.container_statuses[0]
              .container_id.removeprefix("process://"))
    started = time.monotonic()
    cluster.core().delete_namespaced_pod("stubborn", "default")
    from kubernetes import client

    def gone() -> bool:
        try:
            cluster.core().read_namespaced_pod("stubborn", "default")
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for(gone, 60, "the pod to be deleted")
    assert 3 <= time.monotonic() - started < 30  # the grace period was waited out, then SIGKILL
    assert not Path(f"/proc/{pid}").exists()


def test_cluster_up_again_refuses_an_image_the_running_node_was_not_started_with(cluster, tmp_path):
    """The node's image map is kept in state.json as the node starts; `cluster up` reads it there."""
    kept = json.loads((cluster.dir / "state.json").read_text())["node_options"]
    assert kept["gpus"] == 1 and kept["images"]  # the operator chart's images, mapped by the node step
    again = cluster.cli("cluster", "up", "--dir", str(cluster.dir), "--gpus", "1", "--trainer", "--image",
                        f"registry.example.com/ml/toy={tmp_path}")
    assert again.returncode == 1, again.stderr
    assert (f"its node was started without --image registry.example.com/ml/toy={tmp_path}; a node's images are fixed "
            "when it starts") in again.stderr


# --- securityContext: what the process node enforces itself ------------------------------------
def _sh_pod(name: str, command: str, security: dict | None = None, pod_security: dict | None = None) -> dict:
    container = {"name": "main", "image": "busybox", "command": ["sh", "-c", command]}
    if security:
        container["securityContext"] = security
    spec = {"restartPolicy": "Never", "containers": [container], "terminationGracePeriodSeconds": 1}
    if pod_security:
        spec["securityContext"] = pod_security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def delete(core, name: str) -> None:
    from kubernetes.client import ApiException

    try:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _phase(cluster, name: str) -> str:
    return cluster.core().read_namespaced_pod(name, "default").status.phase


def test_run_as_non_root_with_a_root_user_is_refused_as_on_a_cluster(cluster):
    core = cluster.core()
    core.create_namespaced_pod("default", _sh_pod("sec-root", "true", pod_security={"runAsNonRoot": True, "runAsUser": 0}))
    try:
        def waiting():
            statuses = core.read_namespaced_pod("sec-root", "default").status.container_statuses or []
            return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason
        wait_for(lambda: waiting() == "CreateContainerConfigError", 60, "CreateContainerConfigError")
        messages = [e.message for e in events(cluster, "sec-root")]
        assert any("container's runAsUser breaks non-root policy" in m for m in messages), messages
    finally:
        delete(core, "sec-root")


def test_a_container_reads_its_own_token_but_not_another_pods(cluster):
    core = cluster.core()
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    core.create_namespaced_pod("default", _sh_pod("sec-a", "sleep 300"))
    try:
        wait_for(lambda: _phase(cluster, "sec-a") == "Running", 60, "sec-a to run")
        uid = core.read_namespaced_pod("sec-a", "default").metadata.uid
        other = cluster.dir / "kubelet" / "pods" / f"default_sec-a_{uid}"
        theirs = next(other.glob("volumes/kube-api-access-*/token"))
        core.create_namespaced_pod("default", _sh_pod(
            "sec-b", f"test -s {token} && echo own-token-read; cat {theirs} >/dev/null 2>&1 && echo other-read || "
                     "echo other-hidden; id -u",
            security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            pod_security={"runAsUser": 1000, "runAsNonRoot": True}))
        wait_for(lambda: _phase(cluster, "sec-b") in ("Succeeded", "Failed"), 60, "sec-b to finish")
        time.sleep(0.5)
        assert log_of(cluster, "sec-b").split() == ["own-token-read", "other-hidden", "1000"]
    finally:
        for name in ("sec-a", "sec-b"):
            delete(core, name)


def test_an_exec_probe_runs_as_the_containers_user(cluster):
    core = cluster.core()
    pod = _sh_pod("sec-probe", "sleep 300", pod_security={"runAsUser": 1000, "runAsGroup": 1000})
    pod["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["sh", "-c", 'test "$(id -u)" = 1000']},
                                                      "periodSeconds": 1}
    core.create_namespaced_pod("default", pod)
    try:
        wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in
                             core.read_namespaced_pod("sec-probe", "default").status.conditions or []), 60,
                 "the probe, run as uid 1000, to pass")
    finally:
        delete(core, "sec-probe")


HELPERS = ("nsenter", "unshare", "sh", "mount", "mkdir", "touch", "setpriv", "env", "printf", "python3", "id", "true")


def test_a_restricted_pod_gets_no_program_on_its_path_run_as_root(cluster):
    """A pod PodSecurity `restricted` admits, whose PATH starts with a folder it could write (here
    one of this machine's, made for the test): every program the node might look up there is a fake
    that writes who ran it. Only the container's own program may run, as its user."""
    import shutil
    import tempfile

    from kubernetes import client

    core = cluster.core()
    fakes = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pjk-fakes-"))
    namespace = "sec-restricted"
    try:
        fakes.chmod(0o777)
        for name in HELPERS:
            (fakes / name).write_text(f"#!/bin/sh\necho \"{name} $(/usr/bin/id -u)\" >> {fakes}/ran\n")
            (fakes / name).chmod(0o755)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"})))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fakes", "namespace": namespace},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "containers": [{"name": "main", "image": "busybox", "command": ["true"],
                                        "env": [{"name": "PATH", "value": f"{fakes}:/usr/bin:/bin"}],
                                        "volumeMounts": [{"name": "scratch", "mountPath": "/var/run/scratch"}],
                                        "securityContext": {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}}]}}
        core.create_namespaced_pod(namespace, pod)  # admitted: it meets `restricted`

        def phase() -> str:
            return core.read_namespaced_pod("fakes", namespace).status.phase

        wait_for(lambda: phase() in ("Succeeded", "Failed"), 60, "the pod to finish")
        assert phase() == "Succeeded"
        assert (fakes / "ran").read_text() == "true 1000\n"  # its own program, as its user; no helper of the node's
    finally:
        core.delete_namespace(namespace, grace_period_seconds=0)
        shutil.rmtree(fakes)


# --- the operator's Helm release ---------------------------------------------------------------
def test_the_operator_is_a_helm_release_whose_helm_test_passes_on_the_node(cluster):
    listed = json.loads(cluster.helm("list", "-A", "-o", "json").stdout)
    # Kubeflow Trainer's release runs beside it on this cluster, as on a cluster moving to v2.
    assert sorted((r["name"], r["namespace"], r["status"], r["chart"]) for r in listed) == [
        ("kubeflow-trainer", "kubeflow-system", "deployed", "kubeflow-trainer-2.3.0"),
        ("training-operator", "kubeflow", "deployed", "pytorch-operator-0.1.0")]
    # The test pod (curl against the operator's metrics Service) runs through the process kubelet.
    tested = cluster.helm("test", "training-operator", "-n", "kubeflow")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Phase:          Succeeded" in tested.stdout
