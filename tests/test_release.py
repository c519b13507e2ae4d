"""A release: one version everywhere, recorded in CHANGELOG.md, and the release check: the wheel that
`make dist` builds (from its sdist), installed into an empty venv and used in an empty folder with no
checkout on the path, renders both charts (both targets of the job chart) and imports a manifest,
writing nothing there but what it was asked for. The release check builds and installs for real (about
a minute: the build, then pip fetching the generator's dependencies): it runs in `make test-slow`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support import MANIFESTS, ROOT, docs, release


def copy_of_version_files(tmp_path: Path) -> Path:
    for name in ("pyproject.toml", *(f"{c}/Chart.yaml" for c in release.CHARTS)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_package_the_charts_and_the_trainer_image_say_one_version():
    assert release.drift() == []
    assert set(release.versions().values()) == {release.package_version()}


def test_a_chart_that_drifts_is_named_with_what_it_says(tmp_path):
    root = copy_of_version_files(tmp_path)
    chart = root / "charts/pytorch-operator/Chart.yaml"
    chart.write_text(chart.read_text().replace(f"version: {release.package_version()}", "version: 9.9.9"))
    assert release.drift(root) == [f"charts/pytorch-operator/Chart.yaml: version is 9.9.9, not {release.package_version()}"]


def test_make_version_writes_every_place_at_once(tmp_path):
    root = copy_of_version_files(tmp_path)
    release.set_version("1.2.3", root)
    assert set(release.versions(root).values()) == {"1.2.3"} and release.drift(root) == []
    assert yaml.safe_load((root / "charts/pytorch-operator/Chart.yaml").read_text())["appVersion"] == "1.9.4"  # upstream's
    with pytest.raises(SystemExit, match="not semver"):
        release.set_version("v1", root)


def test_the_changelog_records_what_this_version_holds():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    entry = changelog.split(f"\n## {release.package_version()}\n", 1)
    assert len(entry) == 2 and entry[1].split("\n## ", 1)[0].strip()


def generator(venv: Path, work: Path, *args: str) -> subprocess.CompletedProcess:
    """As a user's shell runs the installed command: the venv's bin first, no PYTHONPATH, in `work`."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(work.parent / "home"),
           "XDG_CACHE_HOME": str(work.parent / "cache"), "LANG": "C.UTF-8"}
    proc = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{args}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow  # builds the sdist and wheel and installs them with their dependencies: about a minute
@pytest.mark.timeout(900)
def test_the_wheel_from_dist_works_in_an_empty_venv_and_an_empty_folder(tmp_path):
    wheel, sdist = release.python_dist(tmp_path / "dist")
    # What the commands read at run time is in both artifacts: the charts, the schema, the image recipe, the Go modules.
    inside = zipfile.ZipFile(wheel).namelist()
    for name in ("generator/_resources/charts/pytorchjob/values.schema.json", "generator/_resources/charts/pytorch-operator/"
                 "Chart.yaml", "generator/_resources/trainer/Dockerfile", "generator/controlplane/gomodules/go/go.mod",
                 "generator/controlplane/gomodules/go/cmd/etcd/main.go", "generator/controlplane/gomodules/coredns/main.go",
                 "generator/controlplane/gomodules/jobset/go.sum"):
        assert name in inside, name
    assert f"pytorchjob_kit-{release.package_version()}/charts/pytorchjob/Chart.yaml" in tarfile.open(sdist).getnames()

    # The docs' install line, as written, names this wheel.
    shown = docs.command_lines(docs.block("release.md", "Install without a clone"), "pip install")[0]
    assert shown == f"pip install 'dist/{wheel.name}[generator]'", shown
    venv, work = tmp_path / "venv", tmp_path / "work"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[generator]"], check=True, timeout=600,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path)  # a checkout on
    # the path holds the sdist's egg-info, which pip would take for the package installed already
    work.mkdir()
    shutil.copy(MANIFESTS / "tencent-nccl.yaml", work / "job.yaml")  # the user's own manifest

    where = generator(venv, work, "python", "-c", "import generator, generator.paths as p; print(generator.__file__, p.IN_CHECKOUT)")
    assert where.stdout.startswith(str(venv)) and where.stdout.split()[1] == "False", where.stdout
    generator(venv, work, "pytorchjob-kit", "values", "--name", "rel", "--workers", "1", "-o", "rel.yaml")
    assert generator(venv, work, "pytorchjob-kit", "validate", "rel.yaml").stdout == "rel.yaml: valid\n"
    generator(venv, work, "python", "-m", "generator", "render", "rel.yaml", "--release", "rel", "-o", "v1.yaml")
    generator(venv, work, "python", "-m", "generator", "render", "--target", "v2", "rel.yaml", "-o", "v2.yaml")
    (work / "operator.yaml").write_text("leaderElection: true\n")
    generator(venv, work, "pytorchjob-kit", "render", "--chart", "pytorch-operator", "operator.yaml", "--release", "training",
              "--namespace", "kubeflow", "-o", "operator-manifests.yaml")
    generator(venv, work, "pytorchjob-kit", "import", "job.yaml", "-o", "imported.yaml")
    generator(venv, work, "pytorchjob-kit", "validate", "imported.yaml")

    kinds = {name: {o["kind"] for o in yaml.safe_load_all((work / name).read_text()) if o}
             for name in ("v1.yaml", "v2.yaml", "operator-manifests.yaml")}
    assert "PyTorchJob" in kinds["v1.yaml"] and "TrainJob" in kinds["v2.yaml"]
    assert {"Deployment", "CustomResourceDefinition", "ValidatingWebhookConfiguration"} <= kinds["operator-manifests.yaml"]
    assert sorted(os.listdir(work)) == sorted(["job.yaml", "operator.yaml", "rel.yaml", "v1.yaml", "v2.yaml",
                                               "operator-manifests.yaml", "imported.yaml"])
