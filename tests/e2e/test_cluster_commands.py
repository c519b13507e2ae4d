"""submit, status and delete against a real API server and the real operator: what used to be
checked against the HTTP double, where a real server can produce it."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import MANIFESTS
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
# The node runs these jobs for real: a short one, on data the trainer makes offline.
VALUES = ("job: {name: mnist}\noutput: {enabled: true}\ntopology: {workers: 2}\nresources: {requests: {cpu: 100m, memory: 128Mi}}\n"
          "args: [--dataset=digits, --epochs=1, --threads=1]\n")


@pytest.fixture
def values_file(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(VALUES)
    return str(path)


def _job(cluster, ns, name="mnist", group="kubeflow.org", version="v1", plural="pytorchjobs"):
    from kubernetes import client

    try:
        return client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object(group, version, ns, plural, name)
    except client.ApiException as exc:
        assert exc.status == 404
        return None


def _pvc(cluster, ns, name="mnist-output"):
    from kubernetes import client

    try:
        return client.CoreV1Api(cluster.api()).read_namespaced_persistent_volume_claim(name, ns)
    except client.ApiException as exc:
        assert exc.status == 404
        return None


def test_submit_applies_the_claim_and_the_job_then_knows_unchanged_from_configured(cluster, ns, values_file, tmp_path):
    proc = cluster.cli("submit", values_file, "-n", ns, check=True)
    assert proc.stdout == "pytorchjob mnist created\n"
    assert "persistentvolumeclaim mnist-output applied" in proc.stderr
    job, pvc = _job(cluster, ns), _pvc(cluster, ns)
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert {m["manager"] for m in job["metadata"]["managedFields"]} >= {"pytorchjob-kit"}
    assert pvc.metadata.labels["helm.sh/chart"].startswith("pytorchjob-")
    assert cluster.cli("submit", values_file, "-n", ns, check=True).stdout == "pytorchjob mnist unchanged\n"
    changed = tmp_path / "changed.yaml"
    changed.write_text(VALUES.replace("workers: 2", "workers: 3"))
    assert cluster.cli("submit", str(changed), "-n", ns, check=True).stdout == "pytorchjob mnist configured\n"
    assert _job(cluster, ns)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


@pytest.mark.parametrize("target", ["v1", "v2"])
def test_dry_run_is_checked_by_the_server_and_persists_nothing(cluster, ns, values_file, target):
    if target == "v2":  # every node mounts the output under v2: a claim they can share
        Path(values_file).write_text(VALUES.replace("output: {enabled: true}",
                                                    "output: {enabled: true, mountOn: all, accessModes: [ReadWriteMany]}"))
    proc = cluster.cli("submit", values_file, "-n", ns, "--dry-run", "--target", target, check=True)
    assert "dry run: nothing was persisted" in proc.stdout
    assert _job(cluster, ns) is None and _pvc(cluster, ns) is None
    if target == "v2":  # no runtime is made, so Trainer's webhook cannot judge the TrainJob: said, not refused
        assert "trainjob mnist: the API server accepted its schema; Trainer's webhook" in proc.stderr
    v2 = ("trainer.kubeflow.org", "v1alpha1")
    assert _job(cluster, ns, "mnist", *v2, "trainjobs") is None
    assert _job(cluster, ns, "mnist", *v2, "trainingruntimes") is None


def test_a_manifests_namespace_is_used_and_must_agree_with_the_flag(cluster):
    from kubernetes import client

    manifest = MANIFESTS / "tencent-nccl.yaml"
    namespace = yaml.safe_load(manifest.read_text())["metadata"]["namespace"]
    client.CoreV1Api(cluster.api()).create_namespace({"metadata": {"name": namespace}})
    assert cluster.cli("submit", str(manifest), check=True).stdout == "pytorchjob tke-nccl-resnet created\n"
    assert _job(cluster, namespace, "tke-nccl-resnet") is not None
    proc = cluster.cli("submit", str(manifest), "-n", "other")
    assert proc.returncode == 1
    assert f"puts PyTorchJob tke-nccl-resnet in namespace {namespace} but --namespace is other" in proc.stderr


def test_submit_to_a_namespace_that_does_not_exist_says_to_create_it(cluster, values_file):
    proc = cluster.cli("submit", values_file, "-n", "no-such-ns")
    assert proc.returncode == 1
    assert "namespace no-such-ns does not exist; create it first (kubectl create namespace no-such-ns)" in proc.stderr


def test_delete_with_the_claim_and_then_of_what_is_gone(cluster, ns, values_file):
    cluster.cli("submit", values_file, "-n", ns, check=True)
    proc = cluster.cli("delete", "mnist", "-n", ns, "--with-pvc", check=True)
    assert proc.stdout.splitlines() == ["pytorchjob mnist deleted", "persistentvolumeclaim mnist-output deleted"]
    # The API server finishes a deletion once the garbage collector has run, which waits for the pods
    # to end (on the real node, the kubelet gives a container that ignores SIGTERM its 30 s of grace).
    wait_for(lambda: _job(cluster, ns) is None, 120, "the job's deletion to finish")
    assert _job(cluster, ns) is None
    pvc = _pvc(cluster, ns)
    assert pvc is None or pvc.metadata.deletion_timestamp  # protected until its pods are gone
    proc = cluster.cli("delete", "mnist", "-n", ns)
    assert proc.returncode == 1 and f"PyTorchJob mnist not found in namespace {ns}" in proc.stderr


def test_delete_refuses_a_claim_the_chart_did_not_create(cluster, ns, values_file):
    from kubernetes import client

    cluster.cli("submit", values_file, "-n", ns, check=True)
    client.CoreV1Api(cluster.api()).patch_namespaced_persistent_volume_claim(
        "mnist-output", ns, {"metadata": {"labels": {"helm.sh/chart": None}}})
    proc = cluster.cli("delete", "mnist", "-n", ns, "--with-pvc")
    assert proc.returncode == 1 and "was not created by charts/pytorchjob" in proc.stderr
    assert _pvc(cluster, ns).metadata.deletion_timestamp is None


def test_fields_owned_by_another_tool_are_not_taken_over(cluster, ns, values_file):
    from kubernetes import client

    rendered = yaml.safe_load_all(cluster.cli("render", values_file, "--namespace", ns, check=True).stdout)
    job = next(d for d in rendered if d and d["kind"] == "PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5
    client.CustomObjectsApi(cluster.api()).patch_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "pytorchjobs", "mnist", job, field_manager="kubectl",
        _content_type="application/apply-patch+yaml")
    proc = cluster.cli("submit", values_file, "-n", ns)
    # The API server says "conflict with" for one field and "conflicts with" for several (the CRD's
    # defaulted port protocol makes the containers' list one of them).
    assert proc.returncode == 1 and "owned by another tool" in proc.stderr
    assert re.search(r'conflicts? with "kubectl"', proc.stderr), proc.stderr
    assert _job(cluster, ns)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 5


def _kubeconfig_with_token(cluster, path, token):
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "user", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_rbac_refusals_name_the_verb_and_the_resource(cluster, ns, values_file, tmp_path):
    from kubernetes import client

    api = cluster.api()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": "reader"}, "rules": [
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "patch", "create"]}]})
    rbac.create_namespaced_role_binding(ns, {"metadata": {"name": "reader"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]})
    token = core.create_namespaced_service_account_token("reader", ns, {"spec": {"expirationSeconds": 600}}).status.token
    kubeconfig = _kubeconfig_with_token(cluster, tmp_path / "reader.yaml", token)
    proc = cluster.cli("submit", values_file, "-n", ns, "--kubeconfig", kubeconfig)
    assert proc.returncode == 1
    assert f"forbidden: your user cannot patch pytorchjobs in namespace {ns}" in proc.stderr, proc.stderr
    assert _job(cluster, ns) is None


@pytest.fixture
def starting_webhook(cluster, ns):
    """A validating webhook on this namespace's PyTorchJobs whose Service has no pod behind it yet: what
    the API server meets while an operator starts or restarts. Yields a function that takes it away."""
    from kubernetes import client

    api = cluster.api()
    hooks = client.AdmissionregistrationV1Api(api)
    client.CoreV1Api(api).create_namespaced_service(ns, {"metadata": {"name": "starting"}, "spec": {
        "selector": {"app": "not-started"}, "ports": [{"port": 443, "targetPort": 9443}]}})
    name = f"{ns}-starting"
    hooks.create_validating_webhook_configuration({"metadata": {"name": name}, "webhooks": [{
        "name": "starting.pytorchjob-kit.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail", "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "clientConfig": {"service": {"namespace": ns, "name": "starting", "path": "/validate", "port": 443}},
        "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "resources": ["pytorchjobs"],
                   "operations": ["CREATE", "UPDATE"]}]}]})

    def remove() -> None:
        try:
            hooks.delete_validating_webhook_configuration(name)
        except client.ApiException as exc:
            assert exc.status == 404

    yield remove
    remove()


def test_a_webhook_that_stays_unreachable_is_named_with_its_service(cluster, ns, values_file, starting_webhook):
    proc = cluster.cli("submit", values_file, "-n", ns, "--request-timeout", "2")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("waiting up to 2s for the admission webhook starting.pytorchjob-kit.test "
                                  '(no endpoints available for service "starting")\n'), proc.stderr
    assert ("the API server could not call the admission webhook starting.pytorchjob-kit.test for PyTorchJob mnist "
            '(no endpoints available for service "starting", still after 2s): its Service starting in namespace '
            f"{ns} has no pod ready to answer; check the operator that serves it (kubectl get pods,endpoints -n {ns}), "
            "then run the command again") in proc.stderr, proc.stderr
    assert _job(cluster, ns) is None


def test_submit_waits_out_a_webhook_whose_server_is_starting(cluster, ns, values_file, starting_webhook):
    import sys

    from tests.support import ROOT

    proc = subprocess.Popen([sys.executable, "-m", "generator", "submit", values_file, "-n", ns], env=cluster.env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
        assert first.startswith("waiting up to 30s for the admission webhook starting.pytorchjob-kit.test"), first
        starting_webhook()  # the server is up: the API server admits the job on the next ask
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == "pytorchjob mnist created\n"
    assert _job(cluster, ns)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_rejected_credentials_say_to_log_in_again(cluster, tmp_path):
    kubeconfig = _kubeconfig_with_token(cluster, tmp_path / "stale.yaml", "not-a-token")
    proc = cluster.cli("status", "x", "--kubeconfig", kubeconfig)
    assert proc.returncode == 1 and "rejected your credentials" in proc.stderr and "Traceback" not in proc.stderr


def test_cluster_up_again_with_other_node_options_names_what_the_running_node_has(cluster):
    """A running cluster keeps its node: other capacity is refused naming what it runs with, and
    `--image REPO=host` (this machine's python) with the folder form that runs on the node."""
    again = cluster.cli("cluster", "up", "--dir", str(cluster.dir), "--trainer", "--gpus", "3")
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert (f"the cluster in {cluster.dir} runs already, and its node was started otherwise: --gpus 3 (it runs with 0); "
            f"run `python -m generator cluster down --dir {cluster.dir}`") in " ".join(again.stderr.split())
    image = "registry.example.com/ml/toy=host"
    again = cluster.cli("cluster", "up", "--dir", str(cluster.dir), "--trainer", "--image", image)
    assert again.returncode == 2, again.stderr
    assert "`--image registry.example.com/ml/toy=DIR[:PATH]`" in " ".join(again.stderr.split())


def test_status_of_a_job_the_operator_has_seen(cluster, ns, values_file):
    cluster.cli("submit", values_file, "-n", ns, check=True)
    report = json.loads(cluster.cli("status", "mnist", "-n", ns, "--format", "json", check=True).stdout)
    assert report["namespace"] == ns and report["state"] in ("Created", "Running", "Succeeded")
    table = cluster.cli("status", "mnist", "-n", ns, check=True).stdout
    assert f"PyTorchJob mnist (namespace {ns}): " in table and "PyTorchJobCreated" in table


def test_kubectl_of_the_same_release_works_with_the_kubeconfig(cluster, ns, values_file):
    import subprocess

    from generator.controlplane import build

    cluster.cli("submit", values_file, "-n", ns, check=True)
    proc = subprocess.run([str(build.binary("kubectl")), "get", "pytorchjobs", "-n", ns, "-o", "json"],
                          env=cluster.env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [j["metadata"]["name"] for j in json.loads(proc.stdout)["items"]] == ["mnist"]


# A Trainer v2 TrainJob through the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers of
# the shared cluster: Trainer makes the JobSet, JobSet the node Job and headless Service, the Job
# controller the pods that the node runs; each writes its own status.
V2_VALUES = ("target: v2\njob: {name: mnist}\ntopology: {workers: 1}\n"
             "output: {enabled: true, mountOn: all, accessModes: [ReadWriteMany]}\n"
             "resources: {requests: {cpu: 100m, memory: 128Mi}}\nargs: [--dataset=digits, --epochs=1, --threads=1]\n")


def _background(cluster, *args):
    import subprocess
    import sys

    from tests.support import ROOT

    return subprocess.Popen([sys.executable, "-m", "generator", *args], env=cluster.env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _lines_of(output: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in output.splitlines():
        node, sep, text = line.partition(" | ")
        if sep:
            out.setdefault(node.strip(), []).append(text)
    return out


def test_a_trainjob_goes_through_submit_logs_wait_status_and_delete(cluster, ns, tmp_path):
    from kubernetes import client

    from generator.controlplane import build

    api = cluster.api()
    values = tmp_path / "v2.yaml"
    values.write_text(V2_VALUES)
    proc = cluster.cli("submit", str(values), "-n", ns, check=True)
    assert proc.stdout == "trainjob mnist created\n"
    assert "trainingruntime mnist applied" in proc.stderr and "persistentvolumeclaim mnist-output applied" in proc.stderr
    status = json.loads(cluster.cli("status", "mnist", "-n", ns, "--format", "json", check=True).stdout)
    assert status["kind"] == "TrainJob" and status["state"] in ("Created", "Running")  # Trainer is quick

    logs = _background(cluster, "logs", "mnist", "-n", ns, "-f")
    waiting = _background(cluster, "wait", "mnist", "-n", ns, "--timeout", "600")
    # Trainer made the JobSet (owned by the TrainJob), as `kubectl get jobsets` shows a user.
    wait_for(lambda: subprocess.run([str(build.binary("kubectl")), "get", "jobsets", "-n", ns, "-o", "name"],
                                    env=cluster.env, capture_output=True, text=True).stdout == "jobset.jobset.x-k8s.io/mnist\n",
             120, "Trainer to make the JobSet")
    jobset = client.CustomObjectsApi(api).get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets",
                                                                        "mnist")
    assert [(o["kind"], o["name"]) for o in jobset["metadata"]["ownerReferences"]] == [("TrainJob", "mnist")]
    out, err = waiting.communicate(timeout=600)
    assert waiting.returncode == 0, err
    assert out.strip() == "trainjob mnist complete"
    out, err = logs.communicate(timeout=120)
    assert logs.returncode == 0, err
    nodes = _lines_of(out)
    # Rank 0 alone reports; node-0-1's lines are whatever its container printed besides (none from the trainer).
    assert "node-0-0" in nodes and set(nodes) <= {"node-0-0", "node-0-1"}
    # torchrun made two ranks of two nodes, summing through gloo (the default)
    assert any("world size 2 (gloo, cpu)," in line for line in nodes["node-0-0"])
    assert any("test accuracy" in line for line in nodes["node-0-0"])

    status = json.loads(cluster.cli("status", "mnist", "-n", ns, "--format", "json", check=True).stdout)
    assert (status["state"], status["reason"], status["replicas"]) == (
        "Complete", "AllJobsCompleted", {"node": {"active": 0, "succeeded": 1, "failed": 0}})
    table = cluster.cli("status", "mnist", "-n", ns, check=True).stdout
    assert table.startswith(f"TrainJob mnist (namespace {ns}): Complete\n")
    one = _lines_of(cluster.cli("logs", "mnist", "-n", ns, "--replica", "node-0-1", check=True).stdout)
    # Only that the pod's log is node-0-1's, never node-0-0's: rank 1 reports nothing of its own.
    assert set(one) <= {"node-0-1"}
    wrong = cluster.cli("logs", "mnist", "-n", ns, "--replica", "worker-0")
    assert wrong.returncode == 1 and "write node-0-INDEX, e.g. node-0-1" in wrong.stderr

    proc = cluster.cli("delete", "mnist", "-n", ns, "--with-pvc", check=True)
    assert proc.stdout.splitlines() == ["trainjob mnist deleted", "trainingruntime mnist deleted",
                                        "persistentvolumeclaim mnist-output deleted"]
    core = client.CoreV1Api(api)
    wait_for(lambda: not core.list_namespaced_pod(ns, label_selector="jobset.sigs.k8s.io/jobset-name=mnist").items, 120,
             "the TrainJob's pods to go with it")
    # Deleted in the foreground: the TrainJob goes once the garbage collector has taken its JobSet and Job.
    wait_for(lambda: cluster.cli("status", "mnist", "-n", ns).returncode == 1, 120, "the TrainJob to go")
    missing = cluster.cli("status", "mnist", "-n", ns)
    assert missing.returncode == 1 and f"PyTorchJob mnist not found in namespace {ns}, nor a TrainJob" in missing.stderr


def test_a_failed_trainjob_ends_wait_with_its_reason_and_first_failed_pod(cluster, ns, tmp_path):
    values = tmp_path / "v2.yaml"
    # The trainer refuses the flag at once. backoffLimit 1 is the runtime's failurePolicy.maxRestarts 1
    # with the node Job's backoffLimit 0: the first failed node fails the Job, JobSet restarts the whole
    # set once, and the second failure ends it. Under Never the failed pod stays (the Job controller
    # deletes OnFailure pods as it fails), so wait can name it.
    values.write_text("job: {name: broken}\ntopology: {workers: 1}\nargs: [--dataset=digits, --no-such-flag]\n"
                      "restartPolicy: Never\nrunPolicy: {backoffLimit: 1}\n"
                      "resources: {requests: {cpu: 100m, memory: 128Mi}}\n")
    assert cluster.cli("submit", str(values), "-n", ns, "--target", "v2", check=True).stdout == "trainjob broken created\n"
    waiting = _background(cluster, "wait", "broken", "-n", ns, "--timeout", "600")
    _, message = waiting.communicate(timeout=600)
    assert waiting.returncode == 1, message
    # JobSet's own words: the runtime's failurePolicy.maxRestarts (0 here) was reached, not "FailedJobs".
    assert ("trainjob broken ended Failed, not Complete: ReachedMaxRestarts: jobset failed due to reaching max number "
            "of restarts (first failed job: broken-node-0); first failed pod: broken-node-0-") in message
    from generator.controlplane import build

    restarts = subprocess.run([str(build.binary("kubectl")), "get", "jobset", "broken", "-n", ns, "-o",
                               "jsonpath={.status.restarts}"], env=cluster.env, capture_output=True, text=True)
    assert restarts.stdout == "1", restarts.stderr  # JobSet restarted the set once, as the runtime allows
    assert "(container node exited 1: Error)" in message

    # diagnose reads the same TrainJob: the failed node's exit code and log, then the TrainJob's reason.
    proc = cluster.cli("diagnose", "broken", "-n", ns, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)
    assert found[0]["object"].startswith("Pod/broken-node-0-") and found[0]["reason"] == "Error"
    # The trainer's complaint, not torchrun's traceback of its launcher, ends the log lines shown
    # (of whichever node failed first; the Job controller may stop the other).
    said = [f["message"] for f in found if f["object"].startswith("Pod/") and f["reason"] == "Error"]
    assert any(re.fullmatch(r"container node exited with code 1 \(Error\); its last log lines:\n(.*\n)*"
                            r"    python -m trainer: error: unrecognized arguments: --no-such-flag\n"
                            r"    torchrun: rank [01] \(local_rank: 0\) failed with exit code 2 "
                            r"\(its traceback of the launcher left out\)", m) for m in said), said
    assert ("TrainJob/broken", "ReachedMaxRestarts") in [(f["object"], f["reason"]) for f in found]
    status = cluster.cli("status", "broken", "-n", ns, check=True).stdout
    assert "diagnose: error: Pod/broken-node-0-" in status
