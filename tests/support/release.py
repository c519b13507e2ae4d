"""A release: one version for the package, both charts and the trainer's image, and the artifacts
`make dist` leaves in dist/ (the sdist, the wheel built from it, and both charts packaged by the
helm CLI that `generator cluster build` builds).

    python -m tests.support.release dist [OUT]     # make dist
    python -m tests.support.release version X.Y.Z  # make version V=X.Y.Z: every place at once
    python -m tests.support.release check          # exit 1, naming each place, when they drift

pyproject.toml's `project.version` is the source; the charts' Chart.yaml files must say the same,
which `version` writes and tests/test_release.py checks."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

from generator import paths

BUILD_TOOL = "build==1.6.1"  # PyPA's builder: the sdist, then the wheel from the sdist
CHARTS = ("charts/pytorchjob", "charts/pytorch-operator")


def package_version(root: Path = paths.ROOT) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def versions(root: Path = paths.ROOT) -> dict[str, str]:
    """Each place that names the release's version, with what it says."""
    job = yaml.safe_load((root / CHARTS[0] / "Chart.yaml").read_text())
    operator = yaml.safe_load((root / CHARTS[1] / "Chart.yaml").read_text())
    return {
        "pyproject.toml: project.version": package_version(root),
        f"{CHARTS[0]}/Chart.yaml: version": str(job["version"]),
        f"{CHARTS[0]}/Chart.yaml: appVersion (the trainer image's tag)": str(job["appVersion"]),
        f"{CHARTS[1]}/Chart.yaml: version": str(operator["version"]),
        "the trainer image's tag (generator image build)": _trainer_tag(root),
    }


def _trainer_tag(root: Path) -> str:
    if root != paths.ROOT:  # a copy of the files: the tag as generator/images/trainer.py derives it, from the copy
        return str(yaml.safe_load((root / CHARTS[0] / "Chart.yaml").read_text())["appVersion"])
    from generator.images import trainer

    return trainer.reference("cpu").rpartition(":")[2]


def drift(root: Path = paths.ROOT) -> list[str]:
    """The places that do not say pyproject.toml's version, each with what it says."""
    want = package_version(root)
    return [f"{where} is {said}, not {want}" for where, said in versions(root).items() if said != want]


def set_version(version: str, root: Path = paths.ROOT) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.]+)?", version):
        raise SystemExit(f"version {version!r} is not semver (MAJOR.MINOR.PATCH), which Helm requires of a chart")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^version = "[^"]*"$', f'version = "{version}"', pyproject.read_text(), count=1))
    for chart in CHARTS:
        chart_yaml = root / chart / "Chart.yaml"
        text = re.sub(r"(?m)^version: .*$", f"version: {version}", chart_yaml.read_text(), count=1)
        if chart == CHARTS[0]:
            text = re.sub(r"(?m)^appVersion: .*$", f'appVersion: "{version}"', text, count=1)
        chart_yaml.write_text(text)


def build_python() -> Path:
    """PyPA's build in a venv of its own in the user's cache: the project's venv stays as it is."""
    from tests.support import tools

    return tools.venv(BUILD_TOOL) / "python"


def python_dist(out: Path, root: Path = paths.ROOT) -> tuple[Path, Path]:
    """The sdist and the wheel built from it, into `out`: (wheel, sdist)."""
    subprocess.run([str(build_python()), "-m", "build", "--outdir", str(out), str(root)], check=True,
                   stdout=subprocess.DEVNULL)
    version = package_version(root)
    return out / f"pytorchjob_kit-{version}-py3-none-any.whl", out / f"pytorchjob_kit-{version}.tar.gz"


def chart_dist(out: Path, helm: Path, root: Path = paths.ROOT) -> list[Path]:
    """Both charts as `helm package` archives, into `out`."""
    for chart in CHARTS:
        subprocess.run([str(helm), "package", str(root / chart), "--destination", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    return [out / f"{Path(chart).name}-{package_version(root)}.tgz" for chart in CHARTS]


def dist(out: Path) -> list[Path]:
    from generator.controlplane import build, pins

    problems = drift()
    if problems:
        raise SystemExit("the versions drift: " + "; ".join(problems) + "; run `make version V=...`")
    out.mkdir(parents=True, exist_ok=True)
    helm = build.ensure(lambda line: print(line, file=sys.stderr), ["helm"])[pins.HELM_BINARY]
    made = [*python_dist(out), *chart_dist(out, helm)]
    missing = [str(p) for p in made if not p.is_file()]
    if missing:
        raise SystemExit(f"expected in {out} and not made: {', '.join(missing)}")
    return made


def main(argv: list[str]) -> int:
    if argv[:1] == ["dist"]:
        for artifact in dist(Path(argv[1] if len(argv) > 1 else paths.ROOT / "dist").resolve()):
            print(artifact)
        return 0
    if argv[:1] == ["version"] and len(argv) == 2:
        set_version(argv[1])
        print(f"version {argv[1]} in {', '.join(versions())}; record what it holds in CHANGELOG.md")
        return 0
    if argv[:1] == ["check"]:
        problems = drift()
        print("\n".join(problems) or f"every place says {package_version()}", file=sys.stderr if problems else sys.stdout)
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
