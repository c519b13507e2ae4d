"""What each command loads, as the real `python -m generator` process does it: start-up stays
fast only while the heavy packages stay out of the commands that do not need them (README,
"Start-up time"). These are facts about imports, never times; `make bench` measures the times.

Help loads none of the kubernetes client, torch and the Helm engine; no job command loads torch,
and only those that talk to a cluster load the kubernetes client (and pydantic, which it
brings). Valid input never loads jsonschema or kubernetes-validate, which are there to explain
a refusal."""
import re
import subprocess
import sys

import pytest
import yaml

from generator.cli import COMMANDS
from tests.support import MANIFESTS, ROOT, TESTS

HEAVY = {"kubernetes", "torch", "helm_python"}
CLUSTER_CLIENT = {"kubernetes", "pydantic"}
REFUSAL_ONLY = {"jsonschema", "kubernetes_validate"}
# Written files are named with os.urandom: secrets brings hashlib, hmac and random to every command.
WRITERS_SKIP = {"secrets"}
# A registry client (TLS, 40 ms to load) only where a job leaves its command to an image not the trainer's.
REGISTRY_CLIENT = {"ssl"}
_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.MULTILINE)


def loaded(*args: str, code: int = 0) -> set[str]:
    """The top-level packages `python -m generator ARGS` imported, read from -X importtime,
    after checking that the command did what it was asked (so an early failure proves nothing)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "generator", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    stderr = "\n".join(line for line in proc.stderr.splitlines() if not _LINE.match(line))
    assert proc.returncode == code, f"{args}: exit {proc.returncode}\n{stderr[-2000:]}"
    names = {match.group(1).split(".")[0] for match in _LINE.finditer(proc.stderr)}
    assert {"click", "generator"} <= names, "-X importtime reported nothing: the probe itself is broken"
    return names


@pytest.fixture(scope="module")
def values_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text("job: {name: mnist}\noutput: {enabled: true}\ntopology: {workers: 2}\n")
    return str(path)


@pytest.mark.parametrize("args", [["--help"], ["--version"]] + [[name, "--help"] for name in COMMANDS],
                         ids=lambda args: " ".join(args))
def test_help_loads_no_cluster_client_torch_or_helm(args):
    assert loaded(*args) & HEAVY == set()


MANIFEST = str(MANIFESTS / "vsphere-cpu.yaml")
SNAPSHOT = TESTS / "generator" / "diagnose" / "recorded" / "failed-replica.yaml"
# (arguments, with {values} and {tmp} filled in; exit status; what it must not load beyond torch
# and the cluster client)
JOB_COMMANDS = [
    (["values", "--name", "bench", "--workers", "2", "--cpu", "2", "-o", "{tmp}/out.yaml"], 0, REFUSAL_ONLY | WRITERS_SKIP | REGISTRY_CLIENT),
    (["validate", "{values}"], 0, REFUSAL_ONLY | REGISTRY_CLIENT),
    (["validate", MANIFEST], 0, REFUSAL_ONLY | {"helm_python"}),
    (["import", MANIFEST, "-o", "{tmp}/imported.yaml"], 0, REFUSAL_ONLY),
    (["render", "{values}", "-o", "{tmp}/manifests.yaml"], 0, REFUSAL_ONLY | WRITERS_SKIP | REGISTRY_CLIENT),
    (["convert", str(MANIFESTS / "digits-ddp.yaml"), "--to", "v2", "--accept", "-o", "{tmp}/v2.yaml"], 0, REFUSAL_ONLY),
    (["run", "{values}", "--dry-run"], 0, REFUSAL_ONLY),
    (["run", MANIFEST, "--dry-run", "--image", "harbor.vsphere.local/library/pytorch-mnist=ghcr.io/pytorchjob-kit/trainer"],
     0, REFUSAL_ONLY),
    (["diagnose", yaml.safe_load(SNAPSHOT.read_text())["job"]["metadata"]["name"], "--from", str(SNAPSHOT)],
     1, set()),  # 1: the snapshot has findings
]


@pytest.mark.parametrize("args, code, also_absent", JOB_COMMANDS, ids=["values", "validate values", "validate manifest", "import", "render",
                              "convert", "run values", "run manifest", "diagnose --from"])
def test_job_commands_off_the_cluster_load_no_torch_and_no_cluster_client(args, code, also_absent, values_file,
                                                                          tmp_path):
    args = [a.format(values=values_file, tmp=tmp_path) for a in args]
    assert loaded(*args, code=code) & ({"torch"} | CLUSTER_CLIENT | also_absent) == set()


def test_commands_that_talk_to_a_cluster_load_its_client_but_never_torch(api, values_file):
    # the api fixture points KUBECONFIG at the fake API server, and the commands inherit it
    for args in (["submit", values_file], ["status", "mnist"], ["delete", "mnist"]):
        names = loaded(*args)
        assert "kubernetes" in names and "torch" not in names, args
