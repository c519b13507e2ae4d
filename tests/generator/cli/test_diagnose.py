"""`python -m generator diagnose`: exit statuses, the table, --save and --from, against the HTTP
double for what needs no node (a job without pods, a missing job)."""
import json

import yaml

from tests.generator.diagnose.rules.shots import pod, shot, unschedulable
from tests.support.cli_helpers import run


def test_a_job_that_cannot_be_read_exits_2(api):
    code, out, err = run("diagnose", "nope", "-n", "ml")
    assert code == 2 and out == ""
    assert "PyTorchJob nope not found in namespace ml" in err


def test_a_fresh_job_has_nothing_wrong_and_its_snapshot_reads_back(api, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("job: {name: mnist}\ntopology: {workers: 1}\n")
    assert run("submit", str(values), "-n", "ml")[0] == 0
    saved = tmp_path / "mnist-snapshot.yaml"
    code, out, err = run("diagnose", "mnist", "-n", "ml", "--save", str(saved))
    assert code == 0, err
    assert out == "PyTorchJob mnist (namespace ml): Created, 0 pod(s)\nnothing wrong found\n"
    assert yaml.safe_load(saved.read_text())["job"]["metadata"]["name"] == "mnist"
    assert run("diagnose", "mnist", "--from", str(saved)) == (0, out, "")
    code, _, err = run("diagnose", "other", "--from", str(saved))
    assert code == 2 and f"{saved} holds PyTorchJob mnist, not other" in err


def test_findings_print_ranked_with_their_fix_and_exit_1(tmp_path):
    message = "0/1 nodes are available: 1 Insufficient cpu."
    snapshot = shot(pods=[pod("mnist-master-0", "Master", "Pending", statuses=[], conditions=unschedulable(message))])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(snapshot.as_dict()))
    code, out, _ = run("diagnose", "mnist", "--from", str(path))
    assert code == 1
    assert out.splitlines()[:4] == [
        "PyTorchJob mnist (namespace ml): Created, 1 pod(s)",
        "1 finding(s), most important first:",
        "1. [error] Pod/mnist-master-0: Insufficient cpu",
        "   0/1 nodes are available: 1 Insufficient cpu."]
    assert "fix: lower `resources.requests.cpu` (each pod asks for 2; the nodes offer 8 in all)" in out
    code, out, _ = run("diagnose", "mnist", "--from", str(path), "--format", "json")
    assert code == 1 and json.loads(out)[0]["object"] == "Pod/mnist-master-0"


def test_a_file_that_is_not_a_snapshot(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text("topology: {workers: 2}\n")
    code, _, err = run("diagnose", "mnist", "--from", str(path))
    assert code == 2 and "is not a snapshot written by `diagnose --save`" in err
