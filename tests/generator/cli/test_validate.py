"""`python -m generator validate`: the schema and the cross-field rules, all findings at once."""
import json

import pytest

from tests.support import MANIFESTS, ROOT, scenarios
from tests.support.cli_helpers import run


def write(tmp_path, text, name="values.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", scenarios.names("pytorchjob"))
def test_every_scenario_is_valid(name):
    code, out, err = run("validate", str(scenarios.DIR / "pytorchjob" / f"{name}.yaml"))
    assert (code, err) == (0, "") and out.endswith(": valid\n")


BROKEN = """\
topology:
  workers: 2
  backend: nccl
  nprocPerNode: "4"
resources:
  requests: {cpu: lots, memory: 8Gi, nvidia.com/gpu: 2}
  limits: {memory: 4Gi}
  gpus: 1
master:
  resources:
    gpus: 0
elasticPolicy:
  enabled: true
  minReplicas: 5
  maxReplicas: 3
port: 70000
job:
  name: Training_Job
imagePullPolicy: Always
"""


def test_reports_every_problem_at_once_with_path_value_and_hint(tmp_path):
    code, out, err = run("validate", write(tmp_path, BROKEN))
    assert code == 1
    for expected in [
        "imagePullPolicy: is not a known key; known keys here: affinity, args,",
        "job.name: is not in the expected form (got 'Training_Job')",
        "port: must be at most 65535 (got 70000)",
        "resources.requests.cpu: is not a valid Kubernetes quantity (got 'lots'); write a Kubernetes quantity",
    ]:
        assert expected in err


def test_each_problem_is_reported_once(tmp_path):
    code, _, err = run("validate", write(tmp_path, "job:\n  name: Bad_Name\n"))
    assert code == 1 and err.count("job.name") == 1


def test_cross_field_rules(tmp_path):
    # The chart's own guards (elastic range, name length) stop a render at the first one,
    # so this case keeps them satisfied and collects every rule on the rendered job.
    text = BROKEN.replace("minReplicas: 5", "minReplicas: 1").replace("cpu: lots", "cpu: '1'")
    text = text.replace("  name: Training_Job", "  name: training").replace(
        "port: 70000\n", "").replace("imagePullPolicy: Always\n", "")
    code, out, err = run("validate", write(tmp_path, text))
    assert code == 1
    for expected in [
        "resources.limits.memory: is below the master request 8Gi",
        "resources.gpus: is below the worker request 2 (got 1)",
        "resources.requests.nvidia.com/gpu: is an extended resource without a limit on the master (got 2)",
        "topology.backend: nccl needs GPUs, and the master pods have none",
        "topology.nprocPerNode: starts 4 processes per pod but the worker has 1 GPU(s)",
    ]:
        assert expected in err, err


def test_json_output_for_ci(tmp_path):
    good = write(tmp_path, "topology: {workers: 1}\n", "good.yaml")
    bad = write(tmp_path, "topology: {workers: -1}\n", "bad.yaml")
    code, out, _ = run("validate", good, bad, "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert [r["valid"] for r in report] == [True, False]
    assert report[1]["findings"] == [{"path": "topology.workers", "message": "must be at least 0", "value": -1,
                                      "hint": "use a value at least 0"}]


def test_release_name_counts_toward_pod_names(tmp_path):
    path = write(tmp_path, "{}\n")
    assert run("validate", path, "--release", "short")[0] == 0
    code, _, err = run("validate", path, "--release", "r" * 50)
    assert code == 1 and f"--release: {'r' * 50!r} makes the job name \"{'r' * 50}-pytorchjob\" (61 characters)" in err
    assert "use a shorter --release, or set job.name" in err


@pytest.mark.parametrize("text, message", [
    ("a: [1\n", "is not valid YAML"),
    ("- just\n- a list\n", "must be a YAML mapping of values (got 'list')"),
])
def test_unreadable_files(tmp_path, text, message):
    code, _, err = run("validate", write(tmp_path, text))
    assert code == 1 and message in err


def test_missing_file_and_usage():
    assert run("validate", "/nonexistent/values.yaml")[0] == 1
    assert run("validate")[0] == 2


def test_empty_file_is_the_defaults(tmp_path):
    assert run("validate", write(tmp_path, ""))[0] == 0


def test_manifests_are_checked_against_the_operator_and_kubernetes(tmp_path):

    good = MANIFESTS / "tencent-nccl.yaml"
    assert run("validate", str(good)) == (0, f"{good}: valid\n", "")
    bad = tmp_path / "job.yaml"
    bad.write_text(good.read_text().replace("replicas: 1", "replicas: 2").replace("imagePullPolicy: Always",
                                                                                    "imagePullPolicy: [Always]"))
    code, _, err = run("validate", str(bad))
    assert code == 1 and "spec.pytorchReplicaSpecs.Master.replicas: must be written and be exactly 1 (got 2)" in err
    schema_only = tmp_path / "schema.yaml"  # the operator admits it; Kubernetes' pod schema does not
    schema_only.write_text(good.read_text().replace("imagePullPolicy: Always", "imagePullPolicy: [Always]"))
    code, _, err = run("validate", str(schema_only))
    assert code == 1 and "imagePullPolicy" in err, err


def test_a_trainjob_manifest_is_checked_as_trainer_would_with_the_runtime_in_its_file(tmp_path):
    good = ROOT / "tests" / "userproject" / "trainjob.yaml"
    assert run("validate", str(good)) == (0, f"{good}: valid\n", "")
    bad = tmp_path / "trainjob.yaml"
    bad.write_text(good.read_text().replace("numNodes: 2", "numNodes: 0"))
    code, out, err = run("validate", str(bad))
    assert (code, out) == (1, "")
    assert "spec.trainer.numNodes" in err and "(got 0)" in err, err


def test_the_old_output_spelling_still_selects_the_format_with_a_warning(tmp_path):
    good = write(tmp_path, "topology: {workers: 1}\n")
    code, out, err = run("validate", good, "--output", "json")
    assert code == 0 and json.loads(out)[0]["valid"] is True
    assert "--output json is deprecated and will be removed; use --format json" in err


def test_the_report_goes_to_the_file_output_names(tmp_path):
    good = write(tmp_path, "topology: {workers: 1}\n")
    report = tmp_path / "report.json"
    code, out, _ = run("validate", good, "--format", "json", "-o", str(report))
    assert (code, out) == (0, "")
    assert json.loads(report.read_text())[0]["file"] == good


@pytest.mark.parametrize("text, expected", [
    ("topology: {workers: 2}\noutput: {enabled: true, mountOn: all, accessModes: [ReadWriteOnce]}\n",
     "output.accessModes: is ReadWriteOnce but 3 pods mount the claim"),
    ("topology: {workers: 1}\nrunPolicy: {schedulingPolicy: {minAvailable: 3}}\n",
     "runPolicy.schedulingPolicy.minAvailable: is above the job's 2 pods (got 3); use at most 2"),
    ("topology: {workers: 5}\nelasticPolicy: {enabled: true, minReplicas: 1, maxReplicas: 3}\n",
     "topology.workers: is outside the elastic range 1..3 (got 5); start with between 1 and 3 Workers"),
    ("topology: {workers: 1, nprocPerNode: gpu}\n",
     "topology.nprocPerNode: is gpu but some pods request no GPUs"),
    ("topology: {workers: 1}\nresources: {requests: {example.com/fpga: 2}, limits: {example.com/fpga: 3}}\n",
     "resources.requests.example.com/fpga: must equal the limit for an extended resource (got 2); set both to 3"),
    ("topology: {workers: 1}\nworker: {resources: {limits: {memory: 1Gi}}}\nresources: {requests: {memory: 2Gi}}\n",
     "worker.resources.limits.memory: is below the worker request 2Gi (got '1Gi')"),
])
def test_each_rule_on_the_rendered_job_is_named_by_its_values_path(tmp_path, text, expected):
    code, _, err = run("validate", write(tmp_path, text))
    assert code == 1 and expected in err, err


def test_a_report_of_several_problems_starts_with_the_file(tmp_path):
    path = write(tmp_path, "topology: {workers: -1}\nport: 70000\n")
    code, _, err = run("validate", path)
    assert code == 1 and err.startswith(f"{path}: 2 problems:\n  - ")


def test_values_from_stdin_are_read_once_and_checked(tmp_path):
    assert run("validate", "-", input="topology: {workers: 1}\n")[:2] == (0, "-: valid\n")
    code, _, err = run("validate", "-", input="topology: {workers: -1}\n")
    assert code == 1 and "-: topology.workers: must be at least 0 (got -1)" in err


@pytest.mark.parametrize("text, message", [
    ("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)),
     "expands to more than 200000 YAML nodes through its aliases"),
    ("a: " + "[" * 30000 + "]" * 30000 + "\n", "nests more than 100 levels deep (line 1)"),
], ids=["alias bomb", "deep nesting"])
@pytest.mark.parametrize("command", ["validate", "import", "render", "run"])
def test_hostile_yaml_is_refused_before_it_is_built(tmp_path, text, message, command):
    code, out, err = run(command, write(tmp_path, text))
    assert code == 1 and message in err and "Traceback" not in err and out == ""


def test_operator_values_get_every_problem_at_once_with_a_fix(tmp_path):
    values = tmp_path / "operator.yaml"
    values.write_text('replicas: "x"\nreplicaz: 2\nwatchNamespace: Bad_NS\n')
    code, out, err = run("validate", "--chart", "pytorch-operator", str(values))
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"{values}: 3 problems:",
        "  - replicaz: is not a known key; did you mean 'replicas'?",
        "  - replicas: must be an integer (got 'x'); write an integer",
        "  - watchNamespace: is not in the expected form (got 'Bad_NS'); use a namespace name (lower-case letters, digits "
        "and '-', at most 63), or leave it empty to watch every namespace"]
    # The job chart's keys are not offered for the operator's values.
    assert "topology" not in err


def test_operator_values_pass_through_the_charts_own_guards(tmp_path):
    values = tmp_path / "operator.yaml"
    values.write_text("leaderElection: true\n")
    assert run("validate", "--chart", "pytorch-operator", str(values)) == (0, f"{values}: valid\n", "")


ELASTIC = "elasticPolicy: {enabled: true, minReplicas: 1, maxReplicas: 3}\ntopology: {workers: 2}\n"


def test_elastic_jobs_of_other_images_are_valid_with_a_warning_that_success_may_come_before_rank_0s_outputs(tmp_path):
    """training-operator v1.9.4 ends an elastic job with the Master's pod (or any Worker's, with no
    Master), and torch elastic may put rank 0 elsewhere: the job's own code must wait for rank 0."""
    own = write(tmp_path, "image: {repository: registry.example.com/team/bert, tag: '1.4'}\n" + ELASTIC, "own.yaml")
    code, out, err = run("validate", own, "--format", "json")
    assert code == 0
    [report] = json.loads(out)
    assert report["valid"] and [w["path"] for w in report["warnings"]] == ["elasticPolicy.enabled"]
    warning = report["warnings"][0]
    assert "as soon as the Master's pod succeeds" in warning["message"] and "barrier" in warning["hint"]
    assert f"{own}: warning: elasticPolicy.enabled: training-operator v1.9.4 declares" in err
    code, _, err = run("validate", str(MANIFESTS / "elastic-workers.yaml"))
    assert code == 0 and "warning: spec.elasticPolicy:" in err and "any one Worker's pod succeeds" in err


def test_elastic_jobs_of_the_projects_trainer_get_no_warning(tmp_path):
    """Its ranks wait for rank 0's outputs before they exit (trainer/distributed.finish)."""
    ours = write(tmp_path, ELASTIC, "ours.yaml")
    code, out, err = run("validate", ours)
    assert code == 0 and out == f"{ours}: valid\n" and "warning" not in err
    code, _, err = run("validate", write(tmp_path, "image: {repository: registry.example.com/team/bert}\n", "plain.yaml"))
    assert code == 0 and "warning" not in err  # not elastic: the Master (or every Worker) decides


@pytest.mark.parametrize("text", [
    "resources: {requests: {cpu: null}, limits: {memory: 8Gi}}\n",  # a memory limit, no CPU to take one from
    "resources: {gpus: 1}\ngpuResourceName: amd.com/gpu\n",  # an accelerator the SDK does not know
])
def test_v2_values_the_kubeflow_sdk_cannot_read_are_valid_with_a_warning_naming_the_fix(tmp_path, text):
    """TrainerClient reads a node's device from its limits; limits naming none it knows break every
    read of the job, though Trainer runs it."""
    path = write(tmp_path, text)
    code, out, err = run("validate", path, "--target", "v2", "--format", "json")
    assert code == 0
    [report] = json.loads(out)
    assert report["valid"] and [w["path"] for w in report["warnings"]] == ["resources.limits"]
    warning = report["warnings"][0]
    assert "Unknown device type" in warning["message"] and "kubeflow/sdk#516" in warning["message"]
    assert "resources.limits.cpu" in warning["hint"]
    assert "warning: resources.limits: name no device the Kubeflow SDK (kubeflow 0.5) reads" in err
    assert run("validate", path, "--target", "v1") == (0, f"{path}: valid\n", "")  # the v1 SDK reads any limits


def test_v2_values_with_the_charts_default_limits_get_no_warning(tmp_path):
    """The chart sets the CPU request as the TrainJob's CPU limit beside the default memory limit."""
    path = write(tmp_path, "job: {name: plain}\n")
    assert run("validate", path, "--target", "v2") == (0, f"{path}: valid\n", "")


@pytest.mark.parametrize("target, values", [
    ("v1", "job: {name: demo}\nresources: {requests: {cpu: 2}, limits: {cpu: 1}}\n"),
    ("v2", "job: {name: demo}\nresources: {requests: {cpu: 2}, limits: {cpu: 1}}\n"),
    ("v2", "job: {name: demo}\nresources: {requests: {memory: 8Gi}, limits: {memory: 4Gi}}\n"),
])
def test_a_limit_below_its_request_is_refused_for_both_kinds_as_kubernetes_refuses_the_pods(tmp_path, target, values):
    path = tmp_path / "values.yaml"
    path.write_text(values)
    code, out, err = run("validate", str(path), "--target", target)
    resource = "memory" if "memory" in values else "cpu"
    assert code == 1 and "Traceback" not in err, err
    assert f"resources.limits.{resource}: is below the" in err and f"raise limits.{resource} or lower requests." in err, err


def test_a_chart_that_renders_a_node_limit_below_its_request_never_passes_as_valid(tmp_path, monkeypatch):
    """validate judges the pods the chart renders, not only the values: a copy of the chart whose
    TrainJob CPU limit rounds to the nearest CPU (a 1200m request given a limit of 1) is caught."""
    import shutil

    from generator import paths

    chart = tmp_path / "pytorchjob"
    shutil.copytree(paths.JOB_CHART, chart)
    template = chart / "templates" / "trainjob.yaml"
    text = template.read_text()
    assert "(ceil $cores | int)" in text
    template.write_text(text.replace("(ceil $cores | int)", "(round $cores 0 | int)"))
    monkeypatch.setattr(paths, "JOB_CHART", chart)
    path = tmp_path / "values.yaml"
    path.write_text("job: {name: demo}\nresources: {requests: {cpu: 1200m}}\n")
    code, _, err = run("validate", str(path), "--target", "v2")
    assert code == 1, err
    assert ("resources.limits.cpu: (the chart's, from resources.requests.cpu) is below the node request 1200m: "
            "Kubernetes refuses the node pods, so the TrainJob would never run (got '1')") in err, err
    monkeypatch.setattr(paths, "JOB_CHART", paths.CHARTS / "pytorchjob")
    assert run("validate", str(path), "--target", "v2")[0] == 0  # the chart as it is: a limit of 2
