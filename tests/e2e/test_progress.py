"""Progress where users look, on the real Kubeflow Trainer v2.3.0 with its TrainJobStatus gate on
(`cluster up --trainer`): the trainer's rank 0 posts to the controller's status server (its TLS,
its token check, its rate limit), and status.trainerStatus rises to 100; `generator status` prints
the percent done of a running TrainJob and of a running PyTorchJob (from rank 0's log).

The trainer image must carry this checkout's trainer/: `--image REPO=DIR` lays a copy of it at
/workspace over the torch runtime image (the trainer's image, work starting there), where
`python -m trainer` and `torchrun --module trainer` find it first. Nothing is asked of the network."""
from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml

from tests.e2e.conftest import pull_images
from tests.support import ROOT
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
IMAGE = "registry.example.com/ml/trainer-progress"
ARGS = ["--dataset=digits", "--epochs=12", "--threads=1"]  # long enough for several reports 5 s apart


@pytest.fixture(scope="module")
def node_options(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("progress-code")
    shutil.copytree(ROOT / "trainer", folder / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    return ["--trainer", "--image", f"{IMAGE}:1={folder}"]


@pytest.fixture(scope="module", autouse=True)
def pulled(cluster):
    pull_images(cluster, [f"{IMAGE}:1"], within=600)


def _values(tmp_path, name: str, target: str) -> str:
    path = tmp_path / f"{name}.yaml"
    values = {"target": target, "job": {"name": name}, "topology": {"workers": 1},
              "image": {"repository": IMAGE, "tag": "1"}, "args": ARGS,
              "resources": {"requests": {"cpu": "200m", "memory": "512Mi"}}}
    if target == "v1":
        # The torch runtime image has no entrypoint of its own (the trainer's image runs `python -m
        # trainer`): code laid over it names its command, as on any cluster (v2's runtime gives torchrun).
        values["command"] = ["python", "-m", "trainer"]
    path.write_text(yaml.safe_dump(values))
    return str(path)


def _status(cluster, name: str, ns: str) -> tuple[str, dict]:
    """The JSON report, then the table: the table, read later, shows at least the report's progress."""
    report = json.loads(cluster.cli("status", name, "-n", ns, "--format", "json", check=True).stdout)
    text = cluster.cli("status", name, "-n", ns, check=True).stdout
    return text, report


def test_a_trainjob_of_the_trainer_reports_progress_rising_to_100_and_status_prints_it(cluster, ns, tmp_path):
    from kubernetes import client

    cluster.cli("submit", _values(tmp_path, "progress-v2", "v2"), "-n", ns, check=True)
    custom = client.CustomObjectsApi(cluster.api())
    seen: list[int] = []
    printed: list[str] = []

    def read() -> dict:
        return custom.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", "progress-v2")

    def done() -> bool:
        job = read()
        status = (job.get("status") or {}).get("trainerStatus") or {}
        if "progressPercentage" in status and (not seen or seen[-1] != status["progressPercentage"]):
            seen.append(status["progressPercentage"])
            if status["progressPercentage"] < 100 and not printed:
                text, report = _status(cluster, "progress-v2", ns)
                printed.append(text)
                assert report["progress"]["source"] == "status.trainerStatus"
        conditions = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
        assert conditions.get("Failed") != "True", job["status"]
        return conditions.get("Complete") == "True"

    wait_for(done, 600, "the TrainJob to complete", interval=1.0)
    status = read()["status"]["trainerStatus"]
    assert [p for p in seen if 0 < p < 100], seen  # rising through values between 0 and 100 while it trained
    assert seen == sorted(seen) and status["progressPercentage"] == 100
    assert status["estimatedRemainingSeconds"] == 0 and status["lastUpdatedTime"]
    metrics = {m["name"]: m["value"] for m in status["metrics"]}
    assert float(metrics["loss"]) > 0 and metrics["epoch"] == "12/12"
    assert printed and "% done" in printed[0] and "s left" in printed[0], printed


def test_status_of_a_running_pytorchjob_prints_its_percent_done_from_rank_0s_log(cluster, ns, tmp_path):
    cluster.cli("submit", _values(tmp_path, "progress-v1", "v1"), "-n", ns, check=True)
    found: list[tuple[str, dict]] = []

    def reported() -> bool:
        text, report = _status(cluster, "progress-v1", ns)
        assert report["state"] not in ("Succeeded", "Failed"), "the job ended before it printed a progress line"
        if report["state"] == "Running" and (report["progress"] or {}).get("percent") is not None:
            found.append((text, report))
            return True
        return False

    wait_for(reported, 600, "status to show the running PyTorchJob's progress", interval=1.0)
    text, report = found[0]
    assert 0 <= report["progress"]["percent"] < 100 and report["progress"]["source"].startswith("log of pod ")
    printed = re.search(r"progress: (\d+)% done", text)
    assert printed and report["progress"]["percent"] <= int(printed.group(1)) <= 100, text
    assert cluster.cli("wait", "progress-v1", "-n", ns, "--timeout", "600", timeout=660).returncode == 0
