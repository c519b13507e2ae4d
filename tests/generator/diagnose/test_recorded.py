"""diagnose on snapshots recorded with `diagnose --save` from jobs on `generator cluster up`: the
real scheduler's, operator's and kubelet's objects and events, read back from the file."""
from __future__ import annotations

from pathlib import Path

from generator.diagnose import report, rules, snapshot

RECORDED = Path(__file__).parent / "recorded"


def findings(name: str) -> list[rules.Diagnosis]:
    return rules.diagnose(snapshot.load(str(RECORDED / f"{name}.yaml")))


def test_a_job_asking_for_more_gpus_than_the_node_has():
    found = findings("insufficient-gpus")
    assert [(f.severity, f.object, f.reason) for f in found] == [
        ("error", "Pod/bert-master-0 (and 1 more: bert-worker-0)", "Insufficient nvidia.com/gpu")]
    assert "each pod asks for 2; the nodes offer 1 in all" in found[0].fix


def test_a_job_whose_claim_does_not_exist():
    found = findings("missing-claim")
    assert [(f.object, f.reason) for f in found] == [("PersistentVolumeClaim/shared-data", "ClaimNotFound")]


def test_a_replica_that_exited_shows_its_code_and_the_trainers_complaint():
    found = findings("failed-replica")
    assert [(f.object, f.reason) for f in found] == [("Pod/broken-master-0", "Error"),
                                                      ("PyTorchJob/broken", "PyTorchJobFailed"),
                                                      ("Pod/broken-worker-0", "PodsOutliveJob")]
    assert found[0].message.startswith("container pytorch exited with code 2 (Error); its last log lines:")
    assert found[0].message.endswith("python -m trainer: error: unrecognized arguments: --no-such-flag")
    assert report.exit_code(found) == report.FOUND


# Kueue v0.17.0 on `cluster up --kueue --kueue-quota cpu=2`, two-pod jobs of one CPU a pod.
def test_a_job_held_by_kueue_for_quota_names_the_cluster_queue_and_what_it_lacks():
    found = findings("kueue-quota")
    assert [(f.severity, f.object, f.reason) for f in found] == [
        ("warning", "Workload/pytorchjob-late-45e2c", "Pending")]
    assert "insufficient unused quota for cpu in flavor default-flavor" in found[0].message
    assert found[0].fix.startswith("ClusterQueue cluster-queue lacks 2 cpu: the job asks for 2 in all, and 1 admitted "
                                   "workload holds 2 of its 2: the job starts, all its pods at once, when admitted jobs "
                                   "free that quota")


# The same on the real node with `--kueue-quota cpu=500m`, two-pod jobs of 250m a pod: the sums
# are written as the Kubernetes quantities the quota and usage beside them are, not as 0.5.
def test_a_shortfall_of_less_than_a_cpu_is_written_in_millicpus():
    found = findings("kueue-quota-500m")
    assert [(f.severity, f.reason) for f in found] == [("warning", "Pending")]
    assert "insufficient unused quota for cpu in flavor default-flavor, 500m more needed" in found[0].message
    assert found[0].fix.startswith("ClusterQueue cluster-queue lacks 500m cpu: the job asks for 500m in all, and 1 "
                                   "admitted workload holds 500m of its 500m: the job starts")


def test_a_job_naming_a_local_queue_that_does_not_exist():
    found = findings("kueue-no-local-queue")
    assert [(f.severity, f.reason, f.message) for f in found] == [
        ("error", "Inadmissible", "not admitted by Kueue: LocalQueue team-a doesn't exist")]
    assert found[0].fix.startswith("no LocalQueue team-a in namespace default: set `kueue.queueName` (now team-a)")


def test_a_job_admitted_while_its_operators_webhook_is_down_stays_suspended():
    # The training operator scaled to 0 as the quota freed: Kueue's update that resumes the job is
    # refused ("no endpoints available" for the operator's validating webhook), and Kueue retries.
    found = findings("kueue-admitted-suspended")
    assert [(f.object, f.reason) for f in found] == [("Workload/pytorchjob-late-45e2c", "AdmittedButSuspended")]
    assert found[0].message.startswith("admitted by Kueue (ClusterQueue cluster-queue), but the PyTorchJob is still "
                                       "suspended")
    assert "a webhook of the PyTorchJob's own controller is not answering" in found[0].fix


def test_a_job_larger_than_the_whole_quota_is_never_admitted():
    found = findings("kueue-over-quota")
    assert [(f.severity, f.reason) for f in found] == [("error", "Pending")]
    assert "> maximum capacity (2)" in found[0].message
    assert found[0].fix.startswith("the job asks for more cpu than ClusterQueue cluster-queue's whole quota (2), so it "
                                   "is never admitted")


def test_a_gpu_job_on_a_queue_without_gpu_quota_is_never_admitted():
    found = findings("kueue-uncovered")
    assert [(f.severity, f.reason) for f in found] == [("error", "Pending")]
    assert found[0].message.endswith("resource nvidia.com/gpu unavailable in ClusterQueue")
    assert "has no quota for nvidia.com/gpu at all" in found[0].fix and found[0].fix.endswith("set `resources.gpus` to 0")


def test_the_shortfall_is_the_request_less_what_the_quota_leaves_unused():
    """The recording with its figures changed so that quota, usage and request all differ (in both
    recordings the quota equals the usage, which hides quota and usage swapped): a quota of 4 cpu,
    2 held by the admitted workload, a job of 3 (2 + 1) lacks 1."""
    shot = snapshot.load(str(RECORDED / "kueue-quota.yaml"))
    shot.workload["status"]["resourceRequests"][1]["resources"]["cpu"] = "2"
    shot.workload["status"]["conditions"][0]["message"] = (
        "couldn't assign flavors to pod set master: insufficient unused quota for cpu in flavor default-flavor, "
        "1 more needed")
    (flavor,) = shot.cluster_queue["spec"]["resourceGroups"][0]["flavors"]
    next(r for r in flavor["resources"] if r["name"] == "cpu")["nominalQuota"] = "4"
    (found,) = rules.diagnose(shot)
    assert found.fix.startswith("ClusterQueue cluster-queue lacks 1 cpu: the job asks for 3 in all, and 1 admitted "
                                "workload holds 2 of its 4: the job starts"), found.fix
