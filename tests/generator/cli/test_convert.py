"""`python -m generator convert --to v2`: exit 0 when the TrainJobs mean what the PyTorchJobs did, 1
while changes wait for --accept or a job is refused (nothing written), 2 for usage; the report
for people or as JSON; and the v1 job and its conversion both train on digits here."""
import json
import os

import pytest
import yaml

from generator import kinds
from tests.support import MANIFESTS
from tests.support.cli_helpers import run

DIGITS = MANIFESTS / "digits-ddp.yaml"
REFUSED = MANIFESTS / "per-role-differences.yaml"
SAME = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: single}
spec:
  nprocPerNode: "1"
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: ghcr.io/pytorchjob-kit/trainer:0.1.0
              command: [torchrun, --module, trainer]
              env: [{name: PYTHONUNBUFFERED, value: "1"}]
"""


def test_changes_in_meaning_are_reported_and_nothing_is_written_until_accepted(tmp_path):
    out = tmp_path / "v2.yaml"
    code, stdout, stderr = run("convert", str(DIGITS), "--to", "v2", "-o", str(out))
    assert code == 1 and not out.exists()
    assert "digits-ddp -> TrainJob digits-ddp with TrainingRuntime digits-ddp: 4 change(s) in meaning" in stdout
    assert "spec.pytorchReplicaSpecs.Master.template.spec.volumes[output]" in stdout
    assert "nothing written: review the changes" in stdout and stderr == ""
    code, stdout, _ = run("convert", str(DIGITS), "--to", "v2", "-o", str(out), "--accept")
    assert code == 0 and f"wrote the TrainJobs to {out} (changes accepted)" in stdout
    objects = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert [o["kind"] for o in objects] == ["TrainingRuntime", "TrainJob"]
    assert kinds.TRAINJOB.check(objects, str(out)) == []


def test_a_job_without_changes_is_written_at_once_to_stdout_with_the_report_on_stderr(tmp_path):
    path = tmp_path / "single.yaml"
    path.write_text(SAME)
    code, stdout, stderr = run("convert", str(path), "--to", "v2")
    assert code == 0, stderr
    assert "PyTorchJob single -> TrainJob single with TrainingRuntime single: no change in meaning" in stderr
    assert [d["kind"] for d in yaml.safe_load_all(stdout) if d] == ["TrainingRuntime", "TrainJob"]


def test_the_node_loss_tolerations_reach_every_node_unchanged(tmp_path):
    """Imported as nodeLossTolerationSeconds, they render into the TrainingRuntime's pod as they were."""
    job = yaml.safe_load(SAME)
    tolerations = [{"key": "pool", "operator": "Exists"}] + [
        {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}
        for key in ("not-ready", "unreachable")]
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["tolerations"] = tolerations
    path = tmp_path / "single.yaml"
    path.write_text(yaml.safe_dump(job))
    code, stdout, stderr = run("convert", str(path), "--to", "v2")
    assert code == 0 and "no change in meaning" in stderr, stderr
    runtime = next(d for d in yaml.safe_load_all(stdout) if d and d["kind"] == "TrainingRuntime")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == tolerations


def test_a_refused_job_stops_every_write_even_when_accepted(tmp_path):
    out = tmp_path / "v2.yaml"
    code, stdout, stderr = run("convert", str(DIGITS), str(REFUSED), "--to", "v2", "--accept", "-o", str(out))
    assert code == 1 and not out.exists() and "Traceback" not in stderr
    assert "PyTorchJob per-role: refused, 10 problems:" in stdout
    assert "2 job(s): 0 without change, 1 with changes in meaning, 1 refused" in stdout


def test_the_report_as_json(tmp_path):
    code, stdout, _ = run("convert", str(DIGITS), str(REFUSED), "--to", "v2", "--format", "json", "-o",
                          str(tmp_path / "v2.yaml"))
    report = json.loads(stdout)
    assert code == 1 and report["written"] is False
    digits, refused = report["jobs"]
    assert digits["outcome"] == "changes" and digits["command"][:3] == ["torchrun", "--module", "trainer"]
    assert set(digits["changes"][0]) == {"path", "v1", "v2", "fix"}
    assert [o["kind"] for o in digits["objects"]] == ["TrainingRuntime", "TrainJob"]
    assert refused["outcome"] == "refused" and refused["problems"][0]["path"].startswith("spec.pytorchReplicaSpecs.*.")


def test_the_json_report_is_always_on_stdout_and_the_trainjobs_go_only_to_o(tmp_path):
    """`convert --format json | jq` gets the report whatever the outcome, never mixed with manifests."""
    code, stdout, stderr = run("convert", str(DIGITS), "--to", "v2", "--format", "json")
    assert code == 1 and json.loads(stdout)["jobs"][0]["outcome"] == "changes" and stderr == ""
    single = tmp_path / "single.yaml"
    single.write_text(SAME)
    code, stdout, stderr = run("convert", str(single), "--to", "v2", "--format", "json")
    report = json.loads(stdout)
    assert code == 0 and stderr == "" and report["written"] is False and report["jobs"][0]["outcome"] == "same"
    out = tmp_path / "v2.yaml"
    code, stdout, _ = run("convert", str(single), "--to", "v2", "--format", "json", "-o", str(out))
    assert code == 0 and json.loads(stdout)["written"] is True
    assert [d["kind"] for d in yaml.safe_load_all(out.read_text()) if d] == ["TrainingRuntime", "TrainJob"]


@pytest.mark.parametrize("args, code, message", [
    (["convert", "x.yaml"], 2, "Missing option '--to'"),
    (["convert", "x.yaml", "--to", "v3"], 2, "'v3' is not 'v2'"),
    (["convert", "--to", "v2"], 2, "Missing argument 'FILE...'"),
    (["convert", "missing.yaml", "--to", "v2"], 1, "missing.yaml: refused, 1 problem:\n  - no such file"),
])
def test_usage_and_unreadable_files(args, code, message):
    got, stdout, stderr = run(*args)
    assert got == code and message in stderr and "Traceback" not in stderr


@pytest.mark.trains
@pytest.mark.slow  # a long real run, as written: in `make test-slow`, so `make test` stays within 5 minutes
def test_the_v1_job_and_its_conversion_both_train_on_digits(tmp_path):
    converted = tmp_path / "digits-v2.yaml"
    assert run("convert", str(DIGITS), "--to", "v2", "--accept", "-o", str(converted))[0] == 0
    for name, file in (("v1", DIGITS), ("v2", converted)):
        code, _, stderr = run("run", str(file), "--run-dir", str(tmp_path / name))
        assert code == 0, stderr
        metrics = json.loads((tmp_path / name / "digits-output" / "metrics.json").read_text())
        assert metrics["world_size"] == 2, name
    assert "job succeeded: every node succeeded" in stderr  # the v2 run, as JobSet would end it
    assert os.path.exists(tmp_path / "v2" / "digits-output" / "mnist_cnn.pt")
