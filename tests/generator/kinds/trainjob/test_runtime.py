"""What Trainer v2 makes of a TrainJob and its runtime: the node pod, counts, env and restart rules."""
import copy

import pytest

from generator import helm, paths
from generator.errors import UserError
from generator.kinds.trainjob import runtime
from tests.support import trainjobs
from tests.support.trainjobs import IMAGE


def trainjob(name="tj", ref=None, **trainer) -> dict:
    return trainjobs.trainjob(name, {"image": IMAGE, "command": ["torchrun", "--module", "trainer"], **trainer}, ref)


def training_runtime(name="tj", pod_spec=None, job_spec=None, failure_policy=None) -> dict:
    return trainjobs.training_runtime(name, pod_spec, job_spec, failure_policy)


def findings(objects) -> dict[str, str]:
    with pytest.raises(UserError) as caught:
        runtime.resolve(objects)
    return {f.path: f"{f.message} ({f.hint})" for f in caught.value.findings}


def test_torch_distributed_gives_every_node_the_trainer_and_the_defaults_of_a_job():
    r = runtime.resolve([trainjob(numNodes=3, args=["--epochs=2"], env=[{"name": "A", "value": "1"}])])
    assert (r.name, r.nodes, r.runtime) == ("tj", 3, "ClusterTrainingRuntime/torch-distributed")
    node = r.pod["spec"]["containers"][0]
    assert (node["name"], node["image"], node["args"], node["env"]) == ("node", IMAGE, ["--epochs=2"], [{"name": "A", "value": "1"}])
    assert r.pod["spec"]["restartPolicy"] == "OnFailure"  # JobSet's default for its Jobs' pods
    assert (r.node_backoff_limit, r.max_set_restarts, r.active_deadline) == (6, 0, None)


@pytest.mark.parametrize("resources, nproc", [
    (None, "1"),
    ({"limits": {"cpu": "4"}}, "4"),
    ({"requests": {"cpu": "2500m"}}, "3"),  # a quantity's whole value rounds up, as Trainer reads it
    ({"requests": {"cpu": "500m"}}, "1"),
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "8"}}, "2"),  # the request first
    ({"requests": {"cpu": "0"}, "limits": {"cpu": "3"}}, "3"),  # a zero request is no request
    ({"limits": {"nvidia.com/gpu": 8, "cpu": "32"}}, "auto"),
    ({"limits": {"amd.com/GPU": 1}}, "auto"),
    ({"limits": {"nvidia.com/gpu": 0, "cpu": "2"}}, "2"),  # no GPU asked for: the CPUs count
])
def test_an_unset_num_proc_per_node_is_the_gpus_else_the_whole_cpus_of_a_node(resources, nproc):
    job = trainjob(**({"resourcesPerNode": resources} if resources else {}))
    assert runtime.resolve([job]).nproc == nproc
    assert runtime.resolve([trainjob(numProcPerNode=3, resourcesPerNode=resources or {})]).nproc == "3"


def test_a_training_runtime_in_the_file_gives_the_pod_and_the_restart_rules():
    pod = {"restartPolicy": "Never", "volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "tj-output"}}],
           "containers": [{"name": "node", "image": "other:1", "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                           "env": [{"name": "A", "value": "runtime"}, {"name": "B", "value": "runtime"}]},
                          {"name": "sidecar", "image": "busybox:1"}]}
    objects = [trainjob(ref={"name": "tj", "kind": "TrainingRuntime"}, numNodes=2, env=[{"name": "A", "value": "job"}]),
               training_runtime(pod_spec=pod, job_spec={"backoffLimit": 0}, failure_policy={"maxRestarts": 3})]
    r = runtime.resolve(objects)
    node = r.pod["spec"]["containers"][0]
    assert node["image"] == IMAGE  # the TrainJob's trainer wins over the runtime's container
    assert {e["name"]: e["value"] for e in node["env"]} == {"A": "job", "B": "runtime"}
    assert node["volumeMounts"] == [{"name": "out", "mountPath": "/out"}]
    assert [c["name"] for c in r.pod["spec"]["containers"]] == ["node", "sidecar"]
    assert (r.pod["spec"]["restartPolicy"], r.node_backoff_limit, r.max_set_restarts) == ("Never", 0, 3)
    assert objects[1]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] == pod


def test_what_trainer_would_refuse_is_refused_by_path_all_at_once():
    bad = trainjob(name="Bad_Name", numNodes=0, numProcPerNode="auto", command=["python", "-m", "trainer"],
                   env=[{"name": "PET_NNODES", "value": "9"}])
    bad["spec"]["activeDeadlineSeconds"] = 0
    got = findings([bad])
    assert set(got) == {"metadata.name", "spec.trainer.numNodes", "spec.trainer.numProcPerNode",
                        "spec.trainer.command", "spec.trainer.env[0].name", "spec.activeDeadlineSeconds"}
    assert "torchrun" in got["spec.trainer.command"] and "set by Trainer's torch plugin" in got["spec.trainer.env[0].name"]


def test_a_runtime_that_is_not_in_the_file_or_not_a_runtime_is_named():
    got = findings([trainjob(ref={"name": "mine", "kind": "TrainingRuntime"})])
    assert got == {"spec.runtimeRef.name": "names a TrainingRuntime that is not in the file (put the TrainingRuntime "
                                           "in the same file as the TrainJob, or use torch-distributed)"}
    assert set(findings([trainjob(ref={"name": "x", "kind": "Deployment"})])) == {"spec.runtimeRef"}
    assert set(findings([trainjob(), trainjob(name="two")])) == {"kind"}


def test_the_runtimes_pod_goes_through_the_same_path_rules_as_a_pytorchjobs():
    pod = {"containers": [{"name": "node", "volumeMounts": [{"name": "d", "mountPath": "/d", "subPath": "../../etc"}]}],
           "volumes": [{"name": "d", "emptyDir": {}}], "restartPolicy": "Always"}
    got = findings([trainjob(ref={"name": "tj", "kind": "TrainingRuntime"}), training_runtime(pod_spec=pod)])
    assert "TrainingRuntime/tj node pod.spec.containers[0].volumeMounts[0].subPath" in got
    assert "TrainingRuntime/tj node pod restartPolicy" in got
    no_node = training_runtime(pod_spec={"containers": [{"name": "trainer", "image": IMAGE}]})
    assert "has no container named node" in str(findings([trainjob(ref={"name": "tj", "kind": "TrainingRuntime"}),
                                                          no_node]))


@pytest.mark.parametrize("scenario", ["v2", "v2-plain"])
def test_what_the_chart_renders_for_v2_resolves_to_its_topology(scenario):
    import yaml

    values = yaml.safe_load((paths.ROOT / "tests/scenarios/pytorchjob" / f"{scenario}.yaml").read_text())
    objects = helm.render_objects(paths.JOB_CHART, values)
    r = runtime.resolve(copy.deepcopy(objects))
    assert r.nodes == 1 + values["topology"]["workers"]
    assert r.pod["spec"]["containers"][0]["command"][0] == "torchrun"
    if values.get("runPolicy", {}).get("backoffLimit") is not None:
        # a failed node fails its Job at once, so JobSet restarts every node: backoffLimit counts set restarts
        assert (r.node_backoff_limit, r.max_set_restarts) == (0, values["runPolicy"]["backoffLimit"])


@pytest.mark.parametrize("step", [None, "dataset-initializer"], ids=["unlabelled", "another-step"])
def test_a_runtime_whose_node_job_is_not_labelled_the_trainers_is_refused_naming_the_label(step):
    """Trainer v2.3 lays the TrainJob's trainer only over the replicated job labelled as its ancestor
    step: without it, the real one ran the runtime's pod with no command, on one node, with no PET_*.
    The label naming another step (an initializer's) is as good as none."""
    unlabelled = trainjobs.training_runtime("tj", ancestor=False)
    if step:
        unlabelled["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"]["labels"] = {
            runtime.ANCESTOR_LABEL: step}
    with pytest.raises(UserError) as caught:
        runtime.resolve([trainjob(ref={"name": "tj", "kind": "TrainingRuntime"}, numNodes=2), unlabelled])
    assert [f.render() for f in caught.value.findings] == [
        "TrainingRuntime/tj replicatedJobs[node].template.metadata.labels: does not mark node as the trainer's job, so "
        "Trainer v2.3 ignores the TrainJob's trainer (image, command, args, env, numNodes) and sets no PET_* variables"
        + (f" (got '{step}')" if step else "") + "; add the label trainer.kubeflow.org/trainjob-ancestor-step: trainer "
        "to replicated job node's template"]
