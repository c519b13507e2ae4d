"""Each refusal of `validate --target v2` (generator/job/runtime.py) sent to the real Kubeflow
Trainer v2.3.0 of the shared cluster, as a user's `kubectl apply --dry-run=server` sends it: its
CRDs' schemas and CEL rules, then its validating webhooks. Where Trainer accepts what we refuse,
the case says why we refuse it; a case Trainer refuses and we accept would be a generator bug."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from generator.kinds.trainjob import runtime
from tests.support import trainjobs
from tests.support.trainjobs import IMAGE

pytestmark = pytest.mark.e2e
NAMESPACE = "trainer-webhooks"
TORCHRUN = ["torchrun", "--module", "trainer"]


def _job(name="tj", ref=None, spec=None, **trainer):
    job = trainjobs.trainjob(name, {"image": IMAGE, "command": TORCHRUN, **trainer}, ref)
    job["spec"].update(spec or {})
    return job


def _runtime(name="tj", pod_spec=None, extra_jobs=(), ancestor=True):
    rt = trainjobs.training_runtime(name, pod_spec or {"containers": [{"name": "node", "image": IMAGE}]},
                                    ancestor=ancestor)
    rt["spec"]["template"]["spec"]["replicatedJobs"] += [
        {"name": n, "template": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [
            {"name": n, "image": IMAGE}]}}}}} for n in extra_jobs]
    return rt


OWN = {"name": "tj", "kind": "TrainingRuntime"}
# (case, objects, the path we refuse, what Trainer says: "refused", or why we refuse what it accepts)
CASES = [
    ("a name that is not a DNS label", [_job(name="Bad_Name")], "metadata.name", "refused"),
    # Trainer v2.3.0's CRD sets no minimum and its webhook does not look: a job of no nodes trains
    # nothing, which is never what values meant.
    ("no nodes", [_job(numNodes=0)], "spec.trainer.numNodes", "accepted: zero nodes train nothing"),
    ("a process count that is not a number", [_job(numProcPerNode="auto")], "spec.trainer.numProcPerNode",
     "refused"),
    ("an env variable the torch plugin owns", [_job(env=[{"name": "PET_NNODES", "value": "9"}])],
     "spec.trainer.env[0].name", "refused"),
    ("a deadline of 0 s", [_job(spec={"activeDeadlineSeconds": 0})], "spec.activeDeadlineSeconds", "refused"),
    ("a runtime kind that is no runtime", [_job(ref={"name": "x", "kind": "Deployment"})], "spec.runtimeRef",
     "refused"),
    ("a runtime that does not exist", [_job(ref=OWN)], "spec.runtimeRef.name", "refused"),
    # Trainer accepts a command of any shape, but its torch plugin sets only the PET_* variables
    # torchrun reads: `python -m trainer` would start every node as rank 0 of a world of 1.
    ("a command that does not start through torchrun", [_job(command=["python", "-m", "trainer"])],
     "spec.trainer.command", "accepted: without torchrun every node trains alone"),
    # Trainer merges the TrainJob's trainer into the container named `node` of the job labelled its
    # ancestor step; its runtime webhook refuses such a job without one.
    ("a runtime with no container named node",
     [_job(ref=OWN), _runtime(pod_spec={"containers": [{"name": "trainer", "image": IMAGE}]})],
     "TrainingRuntime/tj replicatedJobs[node] containers", "refused"),
    # Trainer lays the trainer only over the replicated job labelled as its ancestor step: without the
    # label the pod has no command, one node runs and no PET_* variable is set (seen on the real one).
    ("a runtime whose node job is not labelled the trainer's", [_job(ref=OWN), _runtime(ancestor=False)],
     "TrainingRuntime/tj replicatedJobs[node].template.metadata.labels", "accepted: the job's trainer would be ignored"),
    # A Job's pods may only use OnFailure or Never; Trainer stores the runtime, and the Job
    # controller's Job would be refused when JobSet creates it, long after submit said yes.
    ("a runtime whose pods restart Always",
     [_job(ref=OWN), _runtime(pod_spec={"restartPolicy": "Always", "containers": [{"name": "node", "image": IMAGE}]})],
     "TrainingRuntime/tj node pod restartPolicy", "accepted: the node Job would be refused later"),
]


def _kubectl(cluster, *args, stdin: str = "") -> subprocess.CompletedProcess:
    from generator.controlplane import build

    return subprocess.run([str(build.binary("kubectl")), "-n", NAMESPACE, *args], input=stdin, env=cluster.env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def namespace(cluster):
    made = _kubectl(cluster, "create", "namespace", NAMESPACE)
    assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    yield NAMESPACE
    _kubectl(cluster, "delete", "namespace", NAMESPACE, "--wait=false")


@pytest.mark.parametrize("case, objects, path, trainer", CASES, ids=[c[0] for c in CASES])
def test_each_v2_refusal_against_trainers_real_webhook(cluster, namespace, case, objects, path, trainer):
    assert path in {f.path for f in runtime.check(objects)}, "validate --target v2 no longer refuses this"
    runtimes = [o for o in objects if o["kind"] == "TrainingRuntime"]
    try:
        # Trainer's webhook reads a TrainJob's runtime: it must exist for real, and Trainer's
        # runtime webhook may refuse the runtime itself
        sent = next((made for made in (_kubectl(cluster, "create", "-f", "-", stdin=yaml.safe_dump(rt))
                                       for rt in runtimes) if made.returncode), None)
        if sent is None:
            job = next(o for o in objects if o["kind"] == "TrainJob")
            sent = _kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job))
    finally:
        for rt in runtimes:
            _kubectl(cluster, "delete", "trainingruntime", rt["metadata"]["name"], "--ignore-not-found")
    said = "refused" if sent.returncode else "accepted"
    assert said == trainer.split(":")[0], f"Trainer {said} it: {sent.stderr or sent.stdout}"
