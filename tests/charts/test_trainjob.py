"""--target v2: the same values as a Kubeflow Trainer v2.3 TrainJob, the mapping written in
DESIGN.md and the chart's README, and a refusal naming the field for what v2 cannot express.
The scenarios v2 and v2-plain are also checked against Trainer's CRDs (tests/support/kube.py)."""
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generator import helm, paths
from generator.errors import UserError
from generator.job import quantity
from tests.support import kube


def render(values: dict) -> dict[str, dict]:
    objects = helm.render_objects(paths.JOB_CHART, {"target": "v2", "job": {"name": "mnist"}, **values}, "r", "ml")
    return {o["kind"]: o for o in objects}


def test_topology_resources_and_launch_map_onto_the_trainjob():
    objects = render({"topology": {"workers": 3, "nprocPerNode": 4}, "resources": {"gpus": 2},
                      "kueue": {"queueName": "team-a"}, "args": ["--epochs=3"],
                      "runPolicy": {"suspend": True, "activeDeadlineSeconds": 600}})
    assert "PyTorchJob" not in objects
    job = objects["TrainJob"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True and job["spec"]["activeDeadlineSeconds"] == 600
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 4 and trainer["numProcPerNode"] == 4  # Master + 3 Workers
    assert trainer["command"] == ["torchrun", "--module", "trainer"]  # v2 sets only PET_*: torchrun reads them
    assert trainer["args"] == ["--backend", "nccl", "--epochs=3"]
    assert trainer["image"] == "ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda"
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 2
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "mnist"}


def test_what_a_trainjob_cannot_hold_goes_into_its_own_runtime():
    objects = render({"topology": {"workers": 1}, "tolerations": [{"key": "k", "operator": "Exists"}],
                      "runPolicy": {"backoffLimit": 2, "ttlSecondsAfterFinished": 60}, "restartPolicy": "Never"})
    runtime = objects["TrainingRuntime"]
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {}}
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {"maxRestarts": 2} and jobset["ttlSecondsAfterFinished"] == 60
    (node,) = jobset["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert node["name"] == "node" and pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]
    assert {v["name"] for v in pod["spec"]["volumes"]} == {"dshm"}
    assert all(kube.trainer_problems(o) == [] for o in objects.values() if o["kind"] in kube.TRAINER_KINDS)


@pytest.mark.parametrize("values, field", [
    ({"topology": {"workers": 1}, "elasticPolicy": {"enabled": True}}, "elasticPolicy"),
    ({"runPolicy": {"cleanPodPolicy": "Running"}}, "runPolicy.cleanPodPolicy"),
    ({"runPolicy": {"schedulingPolicy": {"minAvailable": 2}}}, "runPolicy.schedulingPolicy"),
    ({"topology": {"nprocPerNode": "gpu"}, "resources": {"gpus": 1}}, "topology.nprocPerNode"),
    ({"worker": {"resources": {"gpus": 1}}}, "worker"),
    ({"master": {"env": [{"name": "A", "value": "1"}]}}, "master"),
    ({"output": {"enabled": True}}, "output.mountOn"),
    ({"restartPolicy": "ExitCode"}, "restartPolicy"),
    ({"launcher": "entrypoint"}, "launcher"),
    ({"command": ["python", "-m", "trainer"]}, "command"),
])
def test_what_v2_cannot_express_is_refused_by_name(values, field):
    with pytest.raises(UserError) as refused:
        render(values)
    (finding,) = refused.value.findings
    assert finding.path == field and "--target v2" in finding.render()


@pytest.mark.parametrize("resources, limits", [
    ({}, {"cpu": "1", "memory": "4Gi"}),  # the defaults: a 1-CPU request, a 4Gi memory limit
    ({"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}}, {"cpu": "1", "memory": "1Gi"}),  # not throttled to 1/4
    ({"requests": {"cpu": "1500m"}}, {"cpu": "2", "memory": "4Gi"}),  # rounded up to whole CPUs
    ({"requests": {"cpu": 3}}, {"cpu": "3", "memory": "4Gi"}),
    ({"limits": {"cpu": "8"}}, {"cpu": "8", "memory": "4Gi"}),  # the user's own CPU limit stands
    ({"gpus": 1}, {"memory": "4Gi", "nvidia.com/gpu": 1}),  # the SDK reads the GPUs: no CPU limit
    ({"limits": {"memory": None}}, None),  # no limits at all: nothing for the SDK to misread
    ({"requests": {"cpu": None}}, {"memory": "4Gi"}),  # no request to take it from: validate warns instead
])
def test_a_node_without_gpus_gets_its_cpu_request_in_whole_cpus_as_its_limit_beside_a_memory_limit(resources, limits):
    """The Kubeflow SDK cannot read a TrainJob whose limits hold memory alone; the PyTorchJob of
    the same values keeps the limits as written."""
    trainer = render({"resources": resources})["TrainJob"]["spec"]["trainer"]
    assert trainer.get("resourcesPerNode", {}).get("limits") == limits
    v1 = helm.render_objects(paths.JOB_CHART, {"job": {"name": "mnist"}, "resources": resources}, "r", "ml")
    container = v1[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "cpu" not in container["resources"].get("limits", {}) or "cpu" in resources.get("limits", {})


def test_the_runtime_is_a_helm_hook_so_that_helm_install_applies_it_before_the_trainjob():
    """Trainer's webhook refuses a TrainJob whose runtime does not exist yet, and Helm applies kinds
    it does not know alphabetically: TrainJob before TrainingRuntime (tests/e2e/test_kubeflow_sdk_v2.py
    installs one with the helm CLI)."""
    annotations = render({})["TrainingRuntime"]["metadata"]["annotations"]
    assert annotations == {"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-delete-policy": "before-hook-creation"}


def _cpu_written(millicores: int, form: str) -> str | int:
    if form == "milli":
        return f"{millicores}m"
    if form == "int" and millicores % 1000 == 0:
        return millicores // 1000
    return str(Decimal(millicores) / 1000)


@settings(max_examples=25)
@given(millicores=st.integers(min_value=1, max_value=64000), form=st.sampled_from(["milli", "decimal", "int"]))
def test_the_cpu_limit_a_node_gets_is_never_below_its_cpu_request(millicores, form):
    """Kubernetes refuses a pod whose limit is below its request: a TrainJob whose limit were
    rounded the wrong way (1200m given a limit of 1) would never run."""
    request = _cpu_written(millicores, form)
    trainer = render({"resources": {"requests": {"cpu": request}}})["TrainJob"]["spec"]["trainer"]
    limit = trainer["resourcesPerNode"]["limits"]["cpu"]
    assert quantity.parse(limit) >= quantity.parse(request), (request, limit)
    assert quantity.parse(limit) == max(1, -(-millicores // 1000))  # whole CPUs, rounded up


def test_the_chart_takes_for_v2_exactly_the_restart_policies_the_trainjob_kind_owns():
    """The chart's guard is written in its template; `values --target v2`, `validate` and `run`
    take the kind's list (kinds/trainjob/runtime.py). Each of v1's policies is rendered or refused
    as the kind says, so neither side can change alone."""
    from generator import kinds

    for policy in kinds.PYTORCHJOB.restart_policies:
        if policy in kinds.TRAINJOB.restart_policies:
            pod = render({"restartPolicy": policy})["TrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"][0]
            assert pod["template"]["spec"]["template"]["spec"]["restartPolicy"] == policy
        else:
            with pytest.raises(UserError) as refused:
                render({"restartPolicy": policy})
            assert refused.value.findings[0].path == "restartPolicy", policy
