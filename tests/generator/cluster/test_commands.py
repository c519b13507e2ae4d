"""The cluster commands with the real kubernetes client over real HTTP, against
tests/support/fake_kube_api.py, for what a real API server alone cannot be made to show: jobs
that finish or fail and pods with logs (they need a node), an API without the CRD, a webhook
refusal that passes our own checks, and kubeconfig faults. Everything else runs against a real
control plane in tests/e2e/test_cluster_commands.py."""
import json
import time

import pytest

from tests.support import MANIFESTS, trainjobs
from tests.support.cli_helpers import run, run_beside
from tests.support.fake_kube_api import FakeKubeAPI, now

NS = "ml"


@pytest.fixture
def values_file(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text("job: {name: mnist}\noutput: {enabled: true}\ntopology: {workers: 2}\n")
    return str(path)


def test_submitting_over_a_finished_job_says_so_and_replace_recreates_it(api, values_file):
    assert run("submit", values_file)[0] == 0
    api.set_condition(NS, "mnist", "Succeeded")
    code, _, err = run("submit", values_file)
    assert code == 1 and "already finished (Succeeded)" in err and "--replace" in err
    uid = api.jobs[(NS, "mnist")]["metadata"]["uid"]
    code, out, err = run("submit", values_file, "--replace")
    assert code == 0 and "pytorchjob mnist created" in out and "deleted (it had succeeded)" in err
    assert api.jobs[(NS, "mnist")]["metadata"]["uid"] != uid and "status" not in api.jobs[(NS, "mnist")]


def test_submit_of_values_names_the_release_so_helm_can_take_it_over(api, values_file):
    code, _, err = run("submit", values_file, "--release", "exp7")
    assert code == 0, err
    assert f"helm upgrade --install exp7 charts/pytorchjob -f {values_file} -n {NS}" in err
    for obj in (api.jobs[(NS, "mnist")], api.pvcs[(NS, "mnist-output")]):
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        annotations = obj["metadata"]["annotations"]
        assert (annotations["meta.helm.sh/release-name"], annotations["meta.helm.sh/release-namespace"]) == ("exp7", NS)


def test_submit_a_manifest_and_wait_for_it(api, tmp_path):
    manifest = tmp_path / "job.yaml"
    manifest.write_text((MANIFESTS / "vsphere-cpu.yaml").read_text())
    ns = "kubeflow-user"  # the manifest's own

    def operator(printed):
        printed.wait_for("pytorchjob pytorch-mnist-cpu created")
        api.set_condition(ns, "pytorch-mnist-cpu", "Running")
        printed.wait_for("pytorch-mnist-cpu: Running")
        api.set_condition(ns, "pytorch-mnist-cpu", "Succeeded")

    code, out, err = run_beside(operator, "submit", str(manifest), "--wait", "--timeout", "20", abort=api.give_up)
    assert code == 0, err
    assert "pytorchjob pytorch-mnist-cpu created" in out and "pytorchjob pytorch-mnist-cpu succeeded" in out
    assert "pytorch-mnist-cpu: Running" in err
    assert api.jobs[(ns, "pytorch-mnist-cpu")]["metadata"]["namespace"] == ns
    # A manifest belongs to no release: nothing names one, and no helm command is offered.
    assert "meta.helm.sh/release-name" not in (api.jobs[(ns, "pytorch-mnist-cpu")]["metadata"].get("annotations") or {})
    assert "helm" not in err


def test_logs_before_any_pod_exists(api, values_file):
    assert run("submit", values_file)[0] == 0
    code, out, err = run("logs", "mnist")
    assert code == 0 and out == "" and "has no pods yet" in err


def test_submit_validates_before_touching_the_cluster(api, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topology: {backend: nccl}\n")
    code, _, err = run("submit", str(bad))
    assert code == 1 and "topology.backend: nccl needs GPUs" in err
    assert not [r for r in api.requests if r[0] == "PATCH"]


def test_status_table_and_json(api, values_file):
    assert run("submit", values_file)[0] == 0
    api.set_condition(NS, "mnist", "Running", replicas={"Master": {"active": 1}, "Worker": {"active": 1, "failed": 1}})
    api.set_condition(NS, "mnist", "Failed", reason="PyTorchJobFailed", message="worker-1 exited with code 1")
    code, out, _ = run("status", "mnist")
    assert code == 0
    assert "PyTorchJob mnist (namespace ml): Failed" in out
    assert "Worker           1          0       1" in out
    assert "last: PyTorchJobFailed: worker-1 exited with code 1" in out
    code, out, _ = run("status", "mnist", "--format", "json")
    report = json.loads(out)
    assert report["state"] == "Failed" and report["replicas"]["Worker"] == {"active": 1, "succeeded": 0, "failed": 1}
    assert [(c["type"], c["status"]) for c in report["conditions"]] == [("Created", "True"), ("Running", "False"), ("Failed", "True")]
    assert report["completionTime"]
    assert run("status", "nope")[0] == 1


def test_logs_interleaved_with_prefixes_and_one_replica(api, values_file):
    assert run("submit", values_file)[0] == 0
    master = api.add_pod(NS, "mnist", "Master", 0)
    worker = api.add_pod(NS, "mnist", "Worker", 1)
    api.log(NS, master, "m: starting")
    api.log(NS, worker, "w: starting")
    api.log(NS, master, "m: epoch 1")
    code, out, _ = run("logs", "mnist")
    assert code == 0
    assert out.splitlines() == ["master-0 | m: starting", "worker-1 | w: starting", "master-0 | m: epoch 1"]
    code, out, _ = run("logs", "mnist", "--replica", "worker-1")
    assert out.splitlines() == ["worker-1 | w: starting"]
    code, _, err = run("logs", "mnist", "--replica", "worker-7")
    assert code == 1 and "no such pod" in err and "master-0, worker-1" in err


def test_logs_previous_shows_the_container_before_its_restart(api, values_file):
    assert run("submit", values_file)[0] == 0
    pod = api.add_pod(NS, "mnist", "Worker", 0)
    api.log(NS, pod, "first life: crashed")
    api.restart_container(NS, pod)
    api.log(NS, pod, "second life")
    assert run("logs", "mnist", "--previous")[1].splitlines() == ["worker-0 | first life: crashed"]
    assert run("logs", "mnist")[1].splitlines() == ["worker-0 | second life"]


def test_logs_follow_waits_through_pending_and_restarts(api, values_file):
    assert run("submit", values_file)[0] == 0
    pod = api.add_pod(NS, "mnist", "Master", 0, phase="Pending", waiting="ContainerCreating")

    def operator(printed):
        printed.wait_for("master-0 | waiting: ContainerCreating")
        api.update_pod(NS, pod, "Running", {"running": {"startedAt": now()}})
        api.log(NS, pod, "epoch 1")
        printed.wait_for("master-0 | epoch 1")  # the user is attached before the container dies
        api.restart_container(NS, pod)  # the container dies and the kubelet restarts it
        printed.wait_for("master-0 | container restarted (restart 1)")
        api.log(NS, pod, "resumed at epoch 2")
        api.update_pod(NS, pod, "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}})
        api.set_condition(NS, "mnist", "Succeeded")
        api.close_log(NS, pod)

    code, out, err = run_beside(operator, "logs", "mnist", "--follow", abort=api.give_up)
    assert code == 0
    assert "master-0 | waiting: ContainerCreating" in err
    assert "master-0 | container restarted (restart 1)" in err, (out, err)
    assert out.splitlines() == ["master-0 | epoch 1", "master-0 | resumed at epoch 2"]


def test_wait_exit_codes(api, values_file):
    assert run("submit", values_file)[0] == 0

    def operator(since: int, *condition, **details):
        """Once `wait` watches the job, the operator writes `condition`."""
        def act(printed):
            api.wait_for_request("GET", "watch=true", after=since)
            api.set_condition(NS, "mnist", *condition, **details)
        return act

    watching = operator(len(api.requests), "Running")
    code, out, _ = run_beside(watching, "wait", "mnist", "--for", "Running", "--timeout", "20", abort=api.give_up)
    assert (code, out) == (0, "pytorchjob mnist running\n")
    code, _, err = run("wait", "mnist", "--for", "Succeeded", "--timeout", "1")
    assert code == 2 and "timed out waiting for Succeeded" in err
    worker = api.add_pod(NS, "mnist", "Worker", 1, phase="Failed", exit_code=137)
    failing = operator(len(api.requests), "Failed", reason="PyTorchJobFailed", message="worker failed")
    code, _, err = run_beside(failing, "wait", "mnist", "--timeout", "20", abort=api.give_up)
    assert code == 1
    assert "ended Failed, not Succeeded: PyTorchJobFailed: worker failed" in err
    assert f"first failed pod: {worker} (container pytorch exited 137: Error)" in err


def test_wait_on_a_complete_trainjob_with_no_pods_left_says_it_ended(api):
    """Trainer's Complete is a TrainJob's end: waiting for another state ends at once, as after a
    PyTorchJob's Succeeded; its pods are gone (JobSet deletes them), so none is named as failed."""
    job = trainjobs.trainjob("mnist", {"numNodes": 2, "image": trainjobs.IMAGE})
    job["status"] = {"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                                     "message": "jobset completed successfully", "lastTransitionTime": now()}],
                     "jobsStatus": [{"name": "node", "active": 0, "succeeded": 2, "failed": 0}]}
    api.put_trainjob(NS, job)
    assert run("wait", "mnist", "--timeout", "5") == (0, "trainjob mnist complete\n", "")
    for other in ("Failed", "Running"):
        code, out, err = run("wait", "mnist", "--for", other, "--timeout", "5")
        assert (code, out, err) == (1, "", f"trainjob mnist ended Complete, not {other}: AllJobsCompleted: jobset "
                                           "completed successfully\n")


def test_waiting_on_a_trainjob_never_tells_it_created_again_once_it_ran(api):
    """Trainer writes its Jobs' counts as they change: between two updates they can all read 0, which
    would read as Created after Running (seen on the real node); a job never goes back to Created."""
    import threading

    from generator.cluster import client, ops

    job = trainjobs.trainjob("mnist", {"numNodes": 2, "image": trainjobs.IMAGE})
    job["status"] = {"jobsStatus": [{"name": "node", "active": 2, "succeeded": 0, "failed": 0}]}
    api.put_trainjob(NS, job)
    told, running = [], threading.Event()

    def trainer():
        running.wait(20)
        job["status"] = {"jobsStatus": [{"name": "node", "active": 0, "succeeded": 0, "failed": 0}]}
        api.put_trainjob(NS, job)
        time.sleep(1)  # the watch reads the all-zero counts
        job["status"] = {"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                                         "message": "jobset completed successfully", "lastTransitionTime": now()}],
                         "jobsStatus": [{"name": "node", "active": 0, "succeeded": 2, "failed": 0}]}
        api.put_trainjob(NS, job)

    def on_state(state, cond):
        told.append(state)
        running.set()

    beside = threading.Thread(target=trainer)
    beside.start()
    result = ops.wait_for(client.connect(None, NS, None), "mnist", "Succeeded", 20, on_state=on_state)
    beside.join()
    assert (result.code, result.message) == (ops.REACHED, "trainjob mnist complete")
    assert told == ["Running", "Complete"]


def test_namespace_and_context_flags(api, values_file):
    assert run("submit", values_file, "--namespace", "team-b")[0] == 0
    assert ("team-b", "mnist") in api.jobs
    assert run("submit", values_file, "--context", "other")[0] == 0
    assert ("other-ns", "mnist") in api.jobs


# -- errors a user can act on ---------------------------------------------------------------

def test_no_kubeconfig(tmp_path, monkeypatch, values_file):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run("status", "x")
    assert code == 1 and "no kubeconfig found" in err and "KUBECONFIG" in err and "Traceback" not in err


def test_cluster_unreachable(tmp_path, monkeypatch):
    server = FakeKubeAPI()
    path = server.kubeconfig(tmp_path / "kc")
    server.server.server_close()  # nothing listens on that port any more
    monkeypatch.setenv("KUBECONFIG", path)
    code, _, err = run("status", "x")
    assert code == 1 and f"cannot reach the cluster at {server.url}" in err and "kubectl cluster-info" in err


def test_crd_missing(api, values_file):
    api.crd_installed = False
    code, _, err = run("submit", values_file)
    assert code == 1 and "CRD pytorchjobs.kubeflow.org is missing" in err and "install charts/pytorch-operator first" in err


def test_webhook_rejection_is_passed_on(api, values_file):
    api.webhook = lambda job: "PyTorchJobSpec is not valid: Master ReplicaSpec must have 1 replica"
    code, _, err = run("submit", values_file)
    assert code == 1
    assert ("the admission webhook validator.pytorchjob.training-operator.kubeflow.org rejected PyTorchJob mnist: "
            "PyTorchJobSpec is not valid: Master ReplicaSpec") in err




def test_a_server_that_never_answers_times_out_with_a_sentence(tmp_path, monkeypatch):
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts connections, never answers
    try:
        server = FakeKubeAPI()
        path = server.kubeconfig(tmp_path / "kc")
        server.server.server_close()
        text = (tmp_path / "kc").read_text().replace(server.url, f"http://127.0.0.1:{silent.getsockname()[1]}")
        (tmp_path / "kc").write_text(text)
        monkeypatch.setenv("KUBECONFIG", path)
        code, _, err = run("status", "x", "--request-timeout", "1")  # without it: a hang, ended by pytest-timeout
        assert code == 1 and "cannot reach the cluster" in err and "timed out" in err, err
    finally:
        silent.close()


def test_wait_and_status_tell_why_a_job_has_not_started(api, values_file, monkeypatch):
    from generator.diagnose import hint

    monkeypatch.setattr(hint, "STUCK_SECONDS", 0.0)  # a minute, in production
    assert run("submit", values_file)[0] == 0
    api.add_pod(NS, "mnist", "Master", 0, phase="Pending", waiting="ImagePullBackOff")
    code, _, err = run("wait", "mnist", "--timeout", "2")
    assert code == 2
    assert "pytorchjob mnist has not started running after 0s; `diagnose mnist` says:" in err
    assert "error: Pod/mnist-master-0: ImagePullBackOff: container pytorch: the image cannot be pulled" in err
    assert "fix: check `image.repository`, `image.tag` or `image.digest` (now trainer:1)" in err
    code, out, _ = run("status", "mnist")
    assert code == 0 and "\ndiagnose: error: Pod/mnist-master-0: ImagePullBackOff" in out
    code, out, _ = run("status", "mnist", "--format", "json")
    assert json.loads(out)["diagnosis"]["reason"] == "ImagePullBackOff"


def test_logs_follow_tells_why_a_job_has_not_started(api, values_file, monkeypatch):
    from generator.diagnose import hint

    monkeypatch.setattr(hint, "STUCK_SECONDS", 0.0)
    assert run("submit", values_file)[0] == 0
    api.add_pod(NS, "mnist", "Master", 0, phase="Pending", waiting="ErrImagePull")

    def operator(printed):
        printed.wait_for("error: Pod/mnist-master-0: ErrImagePull")  # told; now the job ends the follow
        api.set_condition(NS, "mnist", "Failed")
        api.update_pod(NS, "mnist-master-0", "Failed", {"terminated": {"exitCode": 1, "reason": "Error"}})
        api.close_log(NS, "mnist-master-0")

    code, _, err = run_beside(operator, "logs", "mnist", "--follow", abort=api.give_up)
    assert code == 0
    assert "pytorchjob mnist has not started running after 0s; `diagnose mnist` says:" in err
    assert "error: Pod/mnist-master-0: ErrImagePull" in err


def test_logs_follow_stops_on_a_refusal_instead_of_retrying_in_silence(api, values_file):
    assert run("submit", values_file)[0] == 0
    api.add_pod(NS, "mnist", "Master", 0)
    api.forbidden.add(("list", "pods"))
    code, _, err = run("logs", "mnist", "--follow")
    assert code == 1 and 'cannot list resource "pods"' in err
    api.forbidden.clear()
    api.forbidden.add(("get", "pods"))

    def operator(printed):
        printed.wait_for("master-0 | stopped following:")
        api.set_condition(NS, "mnist", "Succeeded")

    code, _, err = run_beside(operator, "logs", "mnist", "--follow", abort=api.give_up)
    assert code == 0 and "master-0 | stopped following:" in err and 'cannot get resource "pods"' in err
