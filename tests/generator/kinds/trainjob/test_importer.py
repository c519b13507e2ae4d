"""The torchrun launch the chart writes and the one `import` of a TrainJob recognises are one
command: the chart keeps its own (a template cannot read Python), so this fails when they drift."""
from generator import kinds
from generator.job import validation
from generator.kinds.trainjob import importer as trainjob


def rendered(values: dict) -> dict:
    values = {"job": {"name": "mnist"}, **values}
    checked = validation.check_values(values, kinds.for_values(values))
    assert checked.findings == []
    return {o["kind"]: o for o in checked.objects}


def test_the_charts_v2_launch_is_the_one_import_leaves_out_of_the_values():
    job = rendered({"target": "v2"})["TrainJob"]
    assert job["spec"]["trainer"]["command"] == trainjob.DEFAULT_LAUNCH


def test_the_charts_v1_torchrun_launcher_is_the_same_command():
    job = rendered({"launcher": "torchrun"})["PyTorchJob"]
    containers = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert containers[0]["command"] == trainjob.DEFAULT_LAUNCH
