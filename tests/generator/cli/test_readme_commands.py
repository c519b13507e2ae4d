"""The docs' generator examples (and the README's `make demo`), run as written (in a scratch folder beside the repository's
tests/ and charts/): each exits 0 and writes the files it names."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT, docs, samples


def commands() -> list[str]:
    return docs.command_lines(docs.block("generator.md", "The generator"), "python -m generator")


def test_the_readmes_generator_examples_run_as_written(tmp_path):
    for folder in ("tests", "charts"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    ran = commands()
    assert [shlex.split(c)[3] for c in ran] == ["values", "import", "validate", "render", "validate", "render", "validate",
                                                       "validate", "render"]
    outputs = {}
    for line in ran:
        proc = subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        refused = "--target v2 bert.yaml" in line  # the README says this one exits 1, and why
        assert proc.returncode == (1 if refused else 0), f"{line}\n{proc.stderr}"
        if refused:
            assert "output.mountOn: master has no v2 counterpart" in proc.stderr
        outputs[line] = proc
    for name in ("bert.yaml", "tencent.yaml", "bert-manifests.yaml", "bert-trainjob.yaml", "operator-manifests.yaml"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert outputs["python -m generator validate bert-trainjob.yaml"].stdout == "bert-trainjob.yaml: valid\n"
    report = json.loads(next(p.stdout for c, p in outputs.items() if "--format json" in c))
    assert [(r["file"], r["valid"]) for r in report] == [("bert.yaml", True), ("tencent.yaml", True)]


@pytest.mark.trains
@pytest.mark.slow  # a long real run, as written: in `make test-slow`, so `make test` stays within 5 minutes
def test_the_readmes_trainer_v2_example_trains_every_node_as_written(tmp_path):
    ran = docs.command_lines(docs.block("trainer-v2.md", "Kubeflow Trainer v2: the same values"), "python -m generator")
    assert [shlex.split(c)[3] for c in ran] == ["values", "run"]
    for line in ran:
        proc = subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, f"{line}\n{proc.stderr}"
    assert "job succeeded: every node succeeded" in proc.stderr
    assert all(re.search(rf"^node-0-{i}\s+Succeeded", proc.stderr, re.M) for i in (0, 1))  # the summary table
    metrics = json.loads((tmp_path / "runs/digits-v2/digits-v2-output/metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["final_accuracy"] >= 0.9


@pytest.mark.trains
@pytest.mark.slow  # a long real run, as written: in `make test-slow`, so `make test` stays within 5 minutes
def test_make_demo_prints_the_readmes_sample(tmp_path):
    """`make demo` as a fresh clone runs it (in a scratch folder, with this interpreter for the
    venv's, which the test environment already is): its output is the README's sample, where the
    sample does not say `...`."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("`make` is not on PATH: the README's `make demo` sample cannot be run")
    for name in ("charts", "pyproject.toml", "constraints.txt"):
        (tmp_path / name).symlink_to(ROOT / name)
    proc = subprocess.run([make, "--no-print-directory", "-f", str(ROOT / "Makefile"), "demo", f"PY={sys.executable}",
                           "STAMP="], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=280, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout
    sample = docs.block("README.md", "Two commands", fence="text", after="$ make demo")
    assert samples.mismatch(sample, proc.stdout) == "", proc.stdout
    # What the sample abridges is still there, as it says: eight epochs, and a trained model.
    metrics = json.loads((tmp_path / "runs/demo/demo-output/metrics.json").read_text())
    assert len(metrics["epoch_accuracies"]) == 8 and metrics["final_accuracy"] >= 0.95
    assert f"test accuracy {metrics['final_accuracy']:.4f}," in proc.stdout


def test_the_readmes_diagnose_sample_is_what_diagnose_prints():
    """The sample is a job recorded on `generator cluster up` asking for more GPUs than the node has
    (tests/generator/diagnose/recorded/): diagnosed from that recording, it prints the sample."""
    block = docs.block("diagnose.md", "Why is my job not running")
    command, *sample = block.splitlines()
    assert command == "$ python -m generator diagnose bert"
    recorded = ROOT / "tests/generator/diagnose/recorded/insufficient-gpus.yaml"
    proc = subprocess.run([sys.executable, "-m", "generator", "diagnose", "bert", "--from", str(recorded)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr  # findings
    assert samples.mismatch("\n".join(sample), proc.stdout) == "", proc.stdout


@pytest.mark.trains
def test_the_readmes_migration_example_runs_as_written_and_prints_its_report(tmp_path):
    heading = "Move a PyTorchJob to Trainer v2"
    ran = docs.command_lines(docs.block("trainer-v2.md", heading), "python -m generator")
    assert [shlex.split(c)[3] for c in ran] == ["convert", "convert", "run"]
    prompt, sample = docs.block("trainer-v2.md", heading, fence="text").split("\n", 1)
    assert prompt == f"$ {ran[0]}"
    for folder in ("tests", "charts"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    procs = [subprocess.run([sys.executable, *shlex.split(line)[1:]], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}) for line in ran]
    refused, accepted, trained = procs
    assert refused.returncode == 1 and samples.mismatch(sample, refused.stdout) == "", refused.stdout
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert trained.returncode == 0 and "job succeeded: every node succeeded" in trained.stderr, trained.stderr
    metrics = json.loads((tmp_path / "runs/digits-v2/digits-output/metrics.json").read_text())
    assert metrics["world_size"] == 2
