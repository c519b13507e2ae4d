"""Jobs through the real Kueue v0.19.2 (`cluster up --kueue`), on a cluster of this module's own on
the node `cluster up` chooses (the real node where it can run), whose ClusterQueue holds half a CPU
(`--kueue-quota cpu=500m`): a job of two 250m pods fills it, and fits on two cores beside the
operator's, Trainer's, JobSet's and Kueue's own pods. Each case is the job chart's
`kueue.queueName` as a user sets it, what Kueue does with it (the job held suspended, admitted
whole, started), and what `diagnose` says while it waits."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.conftest import pull_images, trainer_image
from tests.support.waiting import wait_for

# The first test brings the cluster up and pulls the trainer's image, then waits out two jobs in turn.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

QUOTA_CPU, POD_CPU = "500m", "250m"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


@pytest.fixture(scope="module")
def node_options() -> list[str]:
    return ["--trainer", "--kueue", "--kueue-quota", f"cpu={QUOTA_CPU}"]


@pytest.fixture(scope="module", autouse=True)
def pulled(cluster):
    """The trainer's image in the real node before the first job, whose waits are then Kueue's and training's."""
    pull_images(cluster, [trainer_image()])


def _values(cluster, tmp_path, name: str, queue: str, *more: str) -> str:
    path = tmp_path / f"{name}.yaml"
    cluster.cli("values", "--name", name, "--workers", "1", "--cpu", POD_CPU, "--memory", "512Mi", "--queue", queue,
                "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", *more, "-o", str(path), check=True)
    return str(path)


def _workload(cluster, kind: str, name: str) -> dict | None:
    from kubernetes import client

    items = client.CustomObjectsApi(cluster.api()).list_namespaced_custom_object(GROUP, VERSION, "default",
                                                                                "workloads")["items"]
    return next((w for w in items if any(o["kind"] == kind and o["name"] == name
                                         for o in w["metadata"].get("ownerReferences") or [])), None)


def _condition(workload: dict | None, kind: str) -> dict:
    return next((c for c in ((workload or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _pods(cluster, job: str) -> list:
    return [p for p in cluster.core().list_namespaced_pod("default").items if p.metadata.name.startswith(f"{job}-")]


def _diagnose(cluster, name: str) -> list[dict]:
    proc = cluster.cli("diagnose", name, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _pytorchjob(cluster, name: str) -> dict:
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object("kubeflow.org", "v1", "default",
                                                                               "pytorchjobs", name)


def test_two_jobs_over_the_quota_run_one_after_the_other_each_admitted_whole(cluster, tmp_path):
    first, second = _values(cluster, tmp_path, "kq-first", "default"), _values(cluster, tmp_path, "kq-second", "default")
    cluster.cli("submit", first, check=True)
    wait_for(lambda: _condition(_workload(cluster, "PyTorchJob", "kq-first"), "Admitted").get("status") == "True",
             120, "the first job admitted")
    cluster.cli("submit", second, check=True)
    wait_for(lambda: _condition(_workload(cluster, "PyTorchJob", "kq-second"), "QuotaReserved").get("reason") == "Pending",
             120, "Kueue to hold the second job for quota")
    # Held whole: suspended, and not one of its pods made while the first job holds the quota.
    assert _pytorchjob(cluster, "kq-second")["spec"]["runPolicy"]["suspend"] is True
    assert _pods(cluster, "kq-second") == []
    found = _diagnose(cluster, "kq-second")
    held = next(f for f in found if f["object"].startswith("Workload/"))
    assert "insufficient unused quota for cpu in flavor default-flavor" in held["message"]
    # Kueue v0.19 deprecates the PyTorchJob integration; diagnose reads its release off its CRD and says so.
    deprecated = next(f for f in found if f["reason"] == "KueueV1IntegrationDeprecated")
    assert "python -m generator convert FILE --to v2" in deprecated["fix"]
    # In the quantities Kubernetes writes, as the quota and usage beside them are.
    assert held["fix"].startswith("ClusterQueue cluster-queue lacks 500m cpu: the job asks for 500m in all, and 1 "
                                  "admitted workload holds 500m of its 500m")
    # When the first ends, the second is admitted with both pods at once, and runs to the end.
    assert cluster.cli("wait", "kq-first", "--for", "Succeeded", "--timeout", "600").returncode == 0
    assert cluster.cli("wait", "kq-second", "--for", "Succeeded", "--timeout", "600").returncode == 0
    admission = _workload(cluster, "PyTorchJob", "kq-second")["status"]["admission"]
    assert admission["clusterQueue"] == "cluster-queue"
    assert sorted((a["name"], a["count"]) for a in admission["podSetAssignments"]) == [("master", 1), ("worker", 1)]
    ended = max(c.state.terminated.finished_at for p in _pods(cluster, "kq-first") for c in p.status.container_statuses)
    assert min(p.metadata.creation_timestamp for p in _pods(cluster, "kq-second")) >= ended.replace(microsecond=0)
    for name in ("kq-first", "kq-second"):
        cluster.cli("delete", name, check=True)


def test_a_job_naming_a_local_queue_that_does_not_exist_waits_and_diagnose_names_it(cluster, tmp_path):
    values = _values(cluster, tmp_path, "kq-lost", "no-such-queue")
    cluster.cli("submit", values, check=True)
    wait_for(lambda: "doesn't exist" in _condition(_workload(cluster, "PyTorchJob", "kq-lost"), "QuotaReserved").get(
        "message", ""), 120, "Kueue to find no LocalQueue for the job")
    assert _pytorchjob(cluster, "kq-lost")["spec"]["runPolicy"]["suspend"] is True and _pods(cluster, "kq-lost") == []
    found = next(f for f in _diagnose(cluster, "kq-lost") if f["object"].startswith("Workload/"))
    assert (found["severity"], found["message"]) == ("error", "not admitted by Kueue: LocalQueue no-such-queue doesn't exist")
    assert "no LocalQueue no-such-queue in namespace default: set `kueue.queueName`" in found["fix"]
    cluster.cli("delete", "kq-lost", check=True)


def test_a_trainjob_is_held_admitted_and_run_through_kueue(cluster, tmp_path):
    values = _values(cluster, tmp_path, "kq-v2", "default", "--target", "v2")
    done = cluster.cli("submit", values, "--wait", timeout=600)
    assert done.returncode == 0, done.stderr
    workload = _workload(cluster, "TrainJob", "kq-v2")
    assert _condition(workload, "Admitted")["status"] == "True"
    assert [a["count"] for a in workload["status"]["admission"]["podSetAssignments"]] == [2]  # both nodes at once
    assert _condition(workload, "Finished")["status"] == "True"
    # Kueue's webhook suspended it at creation, and Kueue resumed it once admitted.
    from generator.controlplane import build

    events = yaml.safe_load(__import__("subprocess").run(
        [str(build.binary("kubectl")), "get", "events", "-o", "yaml", "--field-selector",
         "involvedObject.kind=TrainJob,involvedObject.name=kq-v2"], env=cluster.env, capture_output=True,
        text=True).stdout)["items"]
    assert {"Suspended", "Started"} & {e["reason"] for e in events}, [e["reason"] for e in events]
    cluster.cli("delete", "kq-v2", check=True)
