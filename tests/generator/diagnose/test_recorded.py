"""diagnose on snapshots recorded with `diagnose --save` from jobs on `generator cluster up`: the
real scheduler's, operator's and process kubelet's objects and events, read back from the file."""
from __future__ import annotations

from pathlib import Path

from generator.diagnose import report, rules, snapshot

RECORDED = Path(__file__).parent / "recorded"


def findings(name: str) -> list[rules.Diagnosis]:
    return rules.diagnose(snapshot.load(str(RECORDED / f"{name}.yaml")))


def test_a_job_asking_for_more_gpus_than_the_node_has():
    found = findings("insufficient-gpus")
    assert [(f.severity, f.object, f.reason) for f in found] == [
        ("error", "Pod/bert-master-0 (and 1 more: bert-worker-0)", "Insufficient nvidia.com/gpu")]
    assert "each pod asks for 2; the nodes offer 1 in all" in found[0].fix


def test_a_job_whose_claim_does_not_exist():
    found = findings("missing-claim")
    assert [(f.object, f.reason) for f in found] == [("PersistentVolumeClaim/shared-data", "ClaimNotFound")]


def test_a_replica_that_exited_shows_its_code_and_the_trainers_complaint():
    found = findings("failed-replica")
    assert [(f.object, f.reason) for f in found] == [("Pod/broken-master-0", "Error"),
                                                      ("PyTorchJob/broken", "PyTorchJobFailed"),
                                                      ("Pod/broken-worker-0", "PodsOutliveJob")]
    assert found[0].message.startswith("container pytorch exited with code 2 (Error); its last log lines:")
    assert found[0].message.endswith("python -m trainer: error: unrecognized arguments: --no-such-flag")
    assert report.exit_code(found) == report.FOUND
