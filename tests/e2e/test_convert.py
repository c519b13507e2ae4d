"""`convert --to v2` against a real API server: the v1 job trains under the real operator, and its
conversion passes the server's dry run (Trainer v2.3's CRDs and webhooks), is submitted, and
trains through the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 of the shared cluster."""
from __future__ import annotations

import json
import re

import pytest

from tests.support import MANIFESTS

pytestmark = pytest.mark.e2e
DIGITS = MANIFESTS / "digits-ddp.yaml"


@pytest.fixture
def ns(cluster):
    from kubernetes import client

    core = client.CoreV1Api(cluster.api())
    name = "t-convert"
    core.create_namespace({"metadata": {"name": name}})
    # The claim the job mounts; the local StorageClass serves every pod on the one node.
    core.create_namespaced_persistent_volume_claim(name, {
        "metadata": {"name": "digits-output"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    yield name
    core.delete_namespace(name)


def test_a_converted_job_passes_the_servers_dry_run_and_trains_as_its_v1_job_did(cluster, ns, tmp_path):
    v1 = cluster.cli("submit", str(DIGITS), "-n", ns, "--wait", "--timeout", "600", check=True)
    assert "pytorchjob digits-ddp created" in v1.stdout
    cluster.cli("delete", "digits-ddp", "-n", ns, check=True)
    metrics = cluster.claim_folder("digits-output", ns) / "metrics.json"
    assert json.loads(metrics.read_text())["world_size"] == 2  # a Master and a Worker
    metrics.unlink()  # what the TrainJob writes below is its own

    converted = tmp_path / "digits-v2.yaml"
    proc = cluster.cli("convert", str(DIGITS), "--to", "v2", "--accept", "--server", "-n", ns, "-o", str(converted))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Trainer's webhook reads the runtime from the cluster, and a dry run creates none: the first
    # check passes all but that, and says so
    assert "the server checked TrainJob digits-ddp but for its runtime" in proc.stdout, proc.stdout
    proc = cluster.cli("submit", str(converted), "-n", ns, "--wait", "--timeout", "600", timeout=660)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("trainjob digits-ddp created\n") and "trainingruntime digits-ddp applied" in proc.stderr
    logs = cluster.cli("logs", "digits-ddp", "-n", ns, "--replica", "node-0-0", check=True).stdout
    assert re.search(r"\S+/metrics\.json$", logs, re.M), logs[-2000:]  # rank 0 wrote it, on the claim's volume
    assert json.loads(metrics.read_text())["world_size"] == 2  # torchrun made two ranks of two nodes
    # With the runtime now on the cluster, Trainer's webhooks admit the whole conversion
    again = cluster.cli("convert", str(DIGITS), "--to", "v2", "--accept", "--server", "-n", ns,
                        "-o", str(tmp_path / "again.yaml"), check=True)
    assert f"(namespace {ns}) admitted it in a dry run" in again.stdout, again.stdout
