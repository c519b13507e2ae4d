"""`convert --to v2` of every PyTorchJob the tests hold (tests/manifests and upstream's examples in
../shared): each case's report and output, kept as a golden under tests/golden/convert/."""
from __future__ import annotations

import copy
from pathlib import Path

from generator.convert import jobs, report
from generator.images import distribution
from generator.images.registry import Registry
from generator.job import values_io
from tests.support import MANIFESTS, REFERENCE
from tests.support.scenarios import GOLDEN

FOLDER = GOLDEN / "convert"
UPSTREAM = REFERENCE / "training-operator-v1.9.4" / "examples"


def case_id(path: Path) -> str:
    return f"upstream-{path.stem}" if path.parent == UPSTREAM else path.stem


def cases() -> list[Path]:
    return sorted(MANIFESTS.glob("*.yaml")) + sorted(UPSTREAM.glob("*.yaml"))


def golden_path(path: Path) -> Path:
    return FOLDER / f"{case_id(path)}.txt"


def converted(path: Path) -> list[report.Conversion]:
    """The file's conversions, named by the case rather than by where the file lies."""
    # As offline with no registry running, whatever this machine's registry holds or the internet serves.
    offline = distribution.Reader(local=Registry(FOLDER / "no-registry"), remote=False)
    out = jobs.convert_file(str(path), "release", None, offline)
    for c in out:
        c.source = f"{case_id(path)}.yaml"
    return out


def text(path: Path) -> str:
    """The report, then what would be written: the golden's content."""
    conversions = converted(path)
    return "".join(report.describe(c) for c in conversions) + values_io.dump_all([o for c in conversions for o in c.objects])


IMAGE = "ghcr.io/pytorchjob-kit/trainer:0.1.0"


def job(**spec_over) -> dict:
    """A Master-only PyTorchJob of the trainer that converts without a change in meaning."""
    container = {"name": "pytorch", "image": IMAGE, "command": ["torchrun", "--module", "trainer"],
                 "args": ["--dataset", "digits"], "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}]}
    spec = {"nprocPerNode": "1", "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
        "spec": {"containers": [container]}}}}}
    spec.update(spec_over)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "t"}, "spec": spec}


def with_workers(j: dict, n: int = 1) -> dict:
    j["spec"]["pytorchReplicaSpecs"]["Worker"] = {**copy.deepcopy(j["spec"]["pytorchReplicaSpecs"]["Master"]), "replicas": n}
    return j


def main(j: dict, role: str = "Master") -> dict:
    return j["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def paths(done) -> list[str]:
    return [c.path for c in done.changes]
