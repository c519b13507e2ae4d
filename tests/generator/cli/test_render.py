"""`python -m generator render`: the real Helm engine, deterministic output."""
import yaml

from tests.support import scenarios
from tests.support.cli_helpers import run


def test_render_matches_the_golden_snapshot_of_each_scenario(tmp_path):
    for name in scenarios.names("pytorchjob"):
        out = tmp_path / f"{name}.yaml"
        code, _, err = run("render", str(scenarios.DIR / "pytorchjob" / f"{name}.yaml"), "--release", scenarios.RELEASE,
                           "--namespace", scenarios.NAMESPACE, "-o", str(out))
        assert code == 0, err
        assert out.read_text() == scenarios.golden_path("pytorchjob", name).read_text()


def test_release_and_namespace_flow_into_the_objects(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("output: {enabled: true}\n")
    code, out, _ = run("render", str(values), "--release", "exp7", "--namespace", "research")
    objects = [d for d in yaml.safe_load_all(out) if d]
    assert {(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in objects} == {
        ("PersistentVolumeClaim", "exp7-pytorchjob-output", "research"), ("PyTorchJob", "exp7-pytorchjob", "research")}
    assert out.startswith("---\n# Source: pytorchjob/templates/")


def test_render_tells_the_helm_command_that_renders_the_same(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("output: {enabled: true}\n")
    code, _, err = run("render", str(values), "--release", "exp7", "--namespace", "research")
    assert code == 0
    assert f"# the same with helm: helm template exp7 charts/pytorchjob -f {values} -n research" in err


def test_render_is_deterministic():
    path = str(scenarios.DIR / "pytorchjob" / "per-role.yaml")
    assert run("render", path)[1] == run("render", path)[1]


def test_invalid_values_leave_no_output_file(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("topology: {backend: nccl}\n")
    out = tmp_path / "out.yaml"
    code, _, err = run("render", str(values), "-o", str(out))
    assert code == 1 and "topology.backend: nccl needs GPUs" in err and not out.exists()


def test_release_name_too_long_for_pod_names(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("{}\n")
    code, _, err = run("render", str(values), "--release", "x" * 50)
    assert code == 1 and "leaves no room for the pod name" in err



def test_render_the_operator_chart_like_helm_template(tmp_path):
    values = tmp_path / "operator.yaml"
    values.write_text("leaderElection: true\n")
    code, out, err = run("render", "--chart", "pytorch-operator", str(values), "--release", "training",
                         "--namespace", "kubeflow")
    assert code == 0, err
    deployment = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    assert deployment["metadata"]["name"] == "training-pytorch-operator"
    assert "--leader-elect" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"# the same with helm: helm template training charts/pytorch-operator -f {values} -n kubeflow" in err
    values.write_text("replicas: 0\n")
    code, out, err = run("render", "--chart", "pytorch-operator", str(values))
    assert code == 1 and out == "" and "replicas: must be at least 1" in err


def test_target_v2_renders_a_trainjob_that_run_plans_as_trainer_v2_nodes(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("job: {name: mnist}\ntopology: {workers: 1}\n")
    code, out, err = run("render", str(values), "--target", "v2")
    assert code == 0, err
    assert [d["kind"] for d in yaml.safe_load_all(out) if d] == ["TrainJob", "TrainingRuntime"]
    assert err.rstrip().endswith(f"helm template release charts/pytorchjob -f {values} -n default --set target=v2")
    values.write_text("target: v2\njob: {name: mnist}\nelasticPolicy: {enabled: true}\ntopology: {workers: 1}\n")
    code, out, err = run("validate", str(values))
    assert code == 1 and "elasticPolicy: Trainer v2 has no elastic jobs" in err
    assert run("validate", "--target", "v1", str(values))[0] == 0
    values.write_text("target: v2\njob: {name: mnist}\ntopology: {workers: 1}\n")
    code, out, err = run("run", str(values), "--dry-run")
    assert code == 0, err
    assert out.startswith("trainjob mnist: 2 node(s) as Trainer v2 runs them")
    assert "  node-0-1 (rank 1, restartPolicy OnFailure): " in out and "-m torch.distributed.run --module trainer" in out
    assert "RANK=" not in out.replace("NODE_RANK=", "") and "PET_NODE_RANK=1" in out
