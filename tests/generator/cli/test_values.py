"""`python -m generator values`: flags to values, the summary, and refusals."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator import helm, paths
from tests.support.cli_helpers import run


def values_of(*args):
    code, out, err = run("values", *args)
    assert code == 0, err
    return yaml.safe_load(out), err


def test_every_flag_lands_in_its_chart_value():
    values, _ = values_of(
        "--name", "bert", "--image", "ghcr.io/me/train:v2", "--workers", "3", "--nproc-per-node", "2",
        "--gpus", "2", "--cpu", "8", "--memory", "32Gi", "--cpu-limit", "16", "--memory-limit", "64Gi",
        "--backend", "nccl", "--output-size", "20Gi", "--shm-size", "8Gi",
        "--toleration", "flyte/gpu=dedicated:NoSchedule", "--toleration", "spot:NoExecute", "--toleration", "ml",
        "--node-loss-toleration", "45", "--node-selector", "pool=a100", "--env", "NCCL_DEBUG=INFO", "--env-from-secret", "s3",
        "--queue", "team-a", "--priority-class", "high", "--elastic", "2:4", "--restart-policy", "ExitCode",
        "--backoff-limit", "5", "--ttl", "600", "--deadline", "7200", "--arg=--epochs=3", "--arg", "--amp",
        "--set", "runPolicy.cleanPodPolicy=All,podLabels.team=nlp")
    assert values == {
        "job": {"name": "bert"},
        "image": {"repository": "ghcr.io/me/train", "tag": "v2"},
        "topology": {"workers": 3, "nprocPerNode": "2", "backend": "nccl"},
        "resources": {"gpus": 2, "requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "16", "memory": "64Gi"}},
        "shm": {"sizeLimit": "8Gi"},
        "kueue": {"queueName": "team-a"},
        "priorityClassName": "high",
        "restartPolicy": "ExitCode",
        "runPolicy": {"backoffLimit": 5, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 7200,
                      "cleanPodPolicy": "All"},
        "output": {"enabled": True, "size": "20Gi"},
        "tolerations": [{"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"},
                        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
                        {"key": "ml", "operator": "Exists"}],
        "nodeLossTolerationSeconds": 45,
        "nodeSelector": {"pool": "a100"},
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "envFrom": [{"secretRef": {"name": "s3"}}],
        "elasticPolicy": {"enabled": True, "minReplicas": 2, "maxReplicas": 4},
        "args": ["--epochs=3", "--amp"],
        "podLabels": {"team": "nlp"},
    }


def test_image_digest_and_existing_pvc():
    values, _ = values_of("--image", "reg.io/x@sha256:" + "d" * 64, "--output-pvc", "shared")
    assert values["image"] == {"repository": "reg.io/x", "digest": "sha256:" + "d" * 64}
    assert values["output"] == {"enabled": True, "existingClaim": "shared"}


def test_summary_tells_pods_processes_world_size_gpus_backend_and_defaults():
    _, summary = values_of("--workers", "3", "--nproc-per-node", "4", "--gpus", "4")
    assert "pods: 4 (1 Master + 3 Workers)" in summary
    assert "processes per pod: 4 (via torchrun)" in summary
    assert "WORLD_SIZE: 16" in summary and "GPUs in total: 16" in summary
    assert "backend: nccl (auto: every pod has GPUs)" in summary
    assert "defaults chose: image ghcr.io/pytorchjob-kit/trainer:0.1.0" in summary
    assert "toleration nvidia.com/gpu:NoSchedule" in summary


def test_node_loss_toleration_renders_for_every_pod_and_v2_node(tmp_path):
    """The flag's seconds reach each pod as the two NoExecute tolerations; the help says what they mean."""
    values, _ = values_of("--node-loss-toleration", "20", "--workers", "1")
    expected = [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}
                for key in ("not-ready", "unreachable")]
    job = helm.render_objects(paths.JOB_CHART, values)[0]
    assert [s["template"]["spec"]["tolerations"] for s in job["spec"]["pytorchReplicaSpecs"].values()] == [expected] * 2
    v2, _ = values_of("--node-loss-toleration", "0", "--target", "v2")
    runtime = next(o for o in helm.render_objects(paths.JOB_CHART, v2) if o["kind"] == "TrainingRuntime")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{**t, "tolerationSeconds": 0} for t in expected]
    code, out, _ = run("values", "--help")
    assert code == 0 and "--node-loss-toleration SECONDS" in out and "before Kubernetes evicts" in " ".join(out.split())


def test_base_file_then_flags_then_set(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("topology:\n  workers: 5\nargs: [--lr, '0.1']\nnodeSelector: {pool: cpu}\n")
    values, _ = values_of("-f", str(base), "--workers", "1", "--arg", "--epochs=2", "--set", "topology.workers=4")
    assert values["topology"]["workers"] == 4
    assert values["args"] == ["--lr", "0.1", "--epochs=2"] and values["nodeSelector"] == {"pool": "cpu"}


def test_output_is_byte_identical_for_the_same_inputs_and_written_atomically(tmp_path):
    args = ["--name", "x", "--workers", "2", "--env", "A=1", "--gpus", "1"]
    out1, out2 = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert run("values", *args, "-o", str(out1))[0] == 0
    assert run("values", *args, "-o", str(out2))[0] == 0
    assert out1.read_bytes() == out2.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]  # no temp files left behind


def test_output_always_validates_and_renders():
    code, out, _ = run("values", "--workers", "0", "--gpus", "1", "--memory", "1Gi")
    assert run("validate", "-", input=out)[:2] == (0, "-: valid\n")
    values = yaml.safe_load(out)
    objects = helm.render_objects(paths.JOB_CHART, values)
    assert list(objects[0]["spec"]["pytorchReplicaSpecs"]) == ["Master"]


@pytest.mark.parametrize("args, message", [
    (["--memory", "8Gi"], "resources.limits.memory: is below the master request 8Gi"),
    (["--backend", "nccl"], "topology.backend: nccl needs GPUs"),
    (["--gpus", "1", "--nproc-per-node", "4"], "topology.nprocPerNode: starts 4 processes per pod but the master has 1 GPU(s)"),
    (["--cpu", "lots"], "resources.requests.cpu: is not a valid Kubernetes quantity (got 'lots')"),
    (["--name", "My_Job"], "job.name: is not in the expected form (got 'My_Job')"),
    (["--name", "a" * 60], "(60 characters) leaves no room for the pod name"),
    (["--elastic", "3:2"], "elasticPolicy.minReplicas: 3 is above elasticPolicy.maxReplicas (2)"),
    (["--elastic", "two"], "--elastic: is not MIN:MAX (got 'two')"),
    (["--elastic", "1:4", "--workers", "0"], "elasticPolicy.enabled: true needs Workers; set topology.workers to at least 1"),
    (["--toleration", "a=b:Sometimes"], "--toleration[0]: is not a toleration"),
    (["--node-selector", "pool"], "--node-selector[0]: is not key=value"),
    (["--env", "NOVALUE"], "--env[0]: is not NAME=VALUE"),
    (["--image", "bad image"], "--image: is not an image reference"),
    (["--output-pvc", "a", "--output-size", "1Gi"], "--output-pvc: and --output-size both given"),
    (["--set", "topology.wrkers=3"], "topology.wrkers: is not a known key; did you mean 'workers'?"),
    (["--set", "port=70000"], "port: must be at most 65535 (got 70000)"),
    (["--shm-size", "1GB"], "shm.sizeLimit: is not a valid Kubernetes quantity"),
    (["--set", "nodeLossTolerationSeconds=-1"], "nodeLossTolerationSeconds: must be at least 0 (got -1); use a value at least 0"),
    (["--set", "nodeLossTolerationSeconds=soon"],
     "nodeLossTolerationSeconds: must be an integer or null (got 'soon'); write an integer or null"),
    (["--node-loss-toleration", "30", "--toleration", "node.kubernetes.io/unreachable:NoExecute"],
     "tolerations[0]: tolerates node.kubernetes.io/unreachable, whose NoExecute deadline nodeLossTolerationSeconds (30) "
     "sets; drop this toleration, or leave nodeLossTolerationSeconds unset"),
])
def test_bad_input_is_refused_with_path_value_and_fix(tmp_path, args, message):
    out = tmp_path / "values.yaml"
    code, stdout, stderr = run("values", *args, "-o", str(out))
    assert code == 1
    assert message in stderr
    assert "Traceback" not in stderr and not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--workers", "-1"], ["--backend", "mpi"], ["--no-such-flag"], ["--gpus", "x"],
                                  ["--node-loss-toleration", "-1"], ["--node-loss-toleration", "5m"]])
def test_usage_errors_exit_2(args):
    assert run("values", *args)[0] == 2


def test_base_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "base.yaml"
    bad.write_text("topology: [unclosed\n")
    code, _, err = run("values", "-f", str(bad))
    assert code == 1 and f"{bad}" in err and "is not valid YAML" in err and "line" in err
    code, _, err = run("values", "-f", str(tmp_path / "missing.yaml"))
    assert code == 1 and "no such file" in err


def test_python_dash_m_entry_and_console_script(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "generator", "values", "--workers", "1"], capture_output=True, text=True)
    assert proc.returncode == 0 and "workers: 1" in proc.stdout and "WORLD_SIZE: 2" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "generator", "values", "--backend", "nccl"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error: values: topology.backend") and "Traceback" not in proc.stderr


def test_debug_shows_the_traceback_instead_of_the_short_message(tmp_path):
    bad = tmp_path / "v.yaml"
    bad.write_text("topology: {backend: nccl}\n")
    quiet = subprocess.run([sys.executable, "-m", "generator", "validate", str(bad)], capture_output=True, text=True)
    loud = subprocess.run([sys.executable, "-m", "generator", "--debug", "render", str(bad)], capture_output=True,
                          text=True)
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr
    assert loud.returncode == 1 and "Traceback (most recent call last)" in loud.stderr and "UserError" in loud.stderr


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "pytorchjob-kit"
    assert script.exists(), "pip install -e . installs the pytorchjob-kit console script"
    proc = subprocess.run([str(script), "values", "--workers", "0"], capture_output=True, text=True)
    assert proc.returncode == 0 and "workers: 0" in proc.stdout


def test_a_python_without_the_tools_packages_gets_a_sentence(tmp_path):
    import subprocess
    import sys

    # -S: no site-packages, as a bare system Python would be
    proc = subprocess.run([sys.executable, "-S", "-m", "generator", "--help"], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(__import__("generator").__path__[0] + "/..")})
    assert proc.returncode == 1 and "is missing from" in proc.stderr and "make venv" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_quantities_in_another_units_system_get_the_kubernetes_spelling(tmp_path):
    code, _, err = run("values", "--memory", "4GB", "-o", str(tmp_path / "v.yaml"))
    assert code == 1 and "write 4Gi (powers of 1024) or 4G (powers of 1000)" in err


def test_values_from_a_file_name_the_file(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("topology: {workers: -2}\n")
    code, _, err = run("values", "-f", str(base), "-o", str(tmp_path / "v.yaml"))
    assert code == 1 and f"{base} with the flags: topology.workers: must be at least 0" in err


def test_v2_summary_says_the_cpu_limit_the_chart_adds_for_the_kubeflow_sdk_and_warns_where_none_can_be():
    values, summary = values_of("--target", "v2", "--cpu", "1500m", "--memory-limit", "8Gi")
    assert "CPU limit 2 per node, the CPU request in whole CPUs (the Kubeflow SDK cannot read a TrainJob whose limits name no cpu" \
        in summary and "warning" not in summary
    assert "cpu" not in values["resources"]["limits"]  # the chart adds it to the TrainJob, not to the values
    _, summary = values_of("--target", "v2", "--cpu-limit", "4")
    assert "per node, the CPU request in whole CPUs" not in summary  # the user's own
    _, summary = values_of("--target", "v2", "--set", "resources.requests.cpu=null")
    assert "per node, the CPU request in whole CPUs" not in summary and "warning: resources.limits: name no device the Kubeflow SDK" in summary


@pytest.mark.parametrize("policy", ["Always", "ExitCode"])
def test_a_restart_policy_the_targets_kind_does_not_take_is_refused_naming_the_flag_and_the_fix(policy):
    code, out, err = run("values", "--target", "v2", "--restart-policy", policy)
    assert code == 2 and out == ""
    assert (f"Invalid value for '--restart-policy': '{policy}' is not a policy TrainJobs take (--target v2): use "
            f"OnFailure or Never, or --target v1 for {policy}") in err
    assert "Traceback" not in err


def test_each_target_takes_its_kinds_restart_policies_and_the_help_says_which():
    from generator import kinds

    for kind in kinds.ALL:
        for policy in kind.restart_policies:
            assert values_of("--target", kind.target, "--restart-policy", policy)[0]["restartPolicy"] == policy
    code, out, _ = run("values", "--help")
    said = " ".join(out.split())
    assert code == 0 and "--target v2 (TrainJob): OnFailure, Never" in said
    assert "--target v1 (PyTorchJob): Always, OnFailure, Never, ExitCode" in said
