"""The one seam per job kind: the lookup decides the kind, and nothing outside generator/kinds
tests which kind it holds."""
import re
import subprocess

import pytest

from generator import kinds
from generator.errors import UserError
from tests.support import ROOT

# What a kind test looks like: the old `_v2(shot)` helper, `is_trainjob`, or a comparison with the name.
KIND_TEST = r'_v2\b|_v2\(|is_trainjob|"TrainJob" ==|== "TrainJob"|"PyTorchJob" ==|== "PyTorchJob"'


def test_no_module_outside_kinds_tests_which_kind_it_holds():
    found = subprocess.run(["grep", "-rnE", KIND_TEST, "generator", "--include=*.py"], cwd=ROOT,
                           capture_output=True, text=True).stdout.splitlines()
    outside = [line for line in found if not line.startswith("generator/kinds/")]
    assert outside == [], "decide the kind through generator.kinds:\n" + "\n".join(outside)


def test_the_pattern_finds_a_kind_test_so_the_check_above_can_fail():
    assert re.search(KIND_TEST, 'if obj.get("kind") == "TrainJob":')
    assert re.search(KIND_TEST, "    if _v2(shot):")


def test_a_file_is_the_kind_of_the_job_it_holds():
    trainjob = {"kind": "TrainJob", "metadata": {"name": "a"}}
    runtime = {"kind": "TrainingRuntime", "metadata": {"name": "a"}}
    pytorchjob = {"kind": "PyTorchJob", "metadata": {"name": "b"}}
    assert kinds.in_manifest([runtime, trainjob]) is kinds.TRAINJOB
    assert kinds.in_manifest([pytorchjob, {"kind": "PersistentVolumeClaim"}]) is kinds.PYTORCHJOB
    assert kinds.in_manifest([{"job": {"name": "values"}}]) is None  # values, not a manifest
    assert kinds.for_objects([{"kind": "PersistentVolumeClaim"}]) is kinds.DEFAULT
    assert kinds.for_object(trainjob) is kinds.TRAINJOB and kinds.for_object({}) is kinds.PYTORCHJOB
    assert kinds.TRAINJOB.job_of([runtime, trainjob]) is trainjob


def test_a_kind_by_name_and_an_unknown_name_refused_with_the_known_ones():
    assert kinds.get("TrainJob") is kinds.TRAINJOB
    with pytest.raises(UserError, match="MPIJob.*PyTorchJob, TrainJob"):
        kinds.get("MPIJob")


def test_each_kind_names_its_own_pods_and_no_other_kinds():
    operator = {"training.kubeflow.org/replica-type": "Worker", "training.kubeflow.org/replica-index": "1"}
    jobset = {"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0",
              "batch.kubernetes.io/job-completion-index": "2"}
    assert kinds.PYTORCHJOB.replica_name(operator) == "worker-1" and kinds.TRAINJOB.replica_name(operator) is None
    assert kinds.TRAINJOB.replica_name(jobset) == "node-0-2" and kinds.PYTORCHJOB.replica_name(jobset) is None


def test_a_trainjob_without_a_running_condition_runs_once_a_child_job_is_active():
    idle = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 0}]}}
    busy = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 2}]}}
    assert kinds.TRAINJOB.condition(idle) == ("Created", {})
    assert kinds.TRAINJOB.condition(busy) == ("Running", {})
    # Its Job ended but JobSet's condition has not reached the TrainJob yet: still Running, not back to Created.
    ended = {"kind": "TrainJob", "status": {"jobsStatus": [{"name": "node", "active": 0, "succeeded": 1}]}}
    assert kinds.TRAINJOB.condition(ended) == ("Running", {})
    assert kinds.PYTORCHJOB.condition({"kind": "PyTorchJob", "status": busy["status"]}) == ("Created", {})
    done = {"type": "Complete", "status": "True"}
    assert kinds.TRAINJOB.condition({**busy, "status": {**busy["status"], "conditions": [done]}}) == ("Complete", done)


def test_suspension_is_read_and_resumed_where_each_kind_keeps_it():
    assert kinds.PYTORCHJOB.suspended({"spec": {"runPolicy": {"suspend": True}}})
    assert not kinds.PYTORCHJOB.suspended({"spec": {"suspend": True}})
    assert kinds.TRAINJOB.suspended({"spec": {"suspend": True}})
    assert kinds.PYTORCHJOB.suspend_patch() == '{"spec":{"runPolicy":{"suspend":false}}}'
    assert kinds.TRAINJOB.suspend_patch() == '{"spec":{"suspend":false}}'


def test_only_a_trainjobs_own_runtime_goes_with_it():
    own = {"metadata": {"name": "a"}, "spec": {"runtimeRef": {"kind": "TrainingRuntime", "name": "a"}}}
    shared = {"metadata": {"name": "a"}, "spec": {"runtimeRef": {"name": "torch-distributed"}}}
    assert kinds.TRAINJOB.own_companions(own) == [("trainingruntimes", "a")]
    assert kinds.TRAINJOB.own_companions(shared) == []
    assert kinds.TRAINJOB.runtime_ref(shared) == ("clustertrainingruntimes", "torch-distributed", False)
    assert kinds.PYTORCHJOB.runtime_ref(own) is None
