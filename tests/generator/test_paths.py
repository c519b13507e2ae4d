"""What the commands read at run time is found through generator/paths.py alone, and everything it
names reaches a wheel: the bundle setup.py copies (the charts, the schema, the trainer's image
recipe) and the Go modules' files the cluster build runs in. A wheel built and used for real is
tests/release/test_release.py's."""
from __future__ import annotations

import fnmatch
import re
import subprocess

import tomllib

from generator import paths

ROOT = paths.ROOT


def test_no_module_but_paths_finds_project_files_from_its_own_location():
    """A module that finds files by its own __file__ would miss them in a wheel, which lays the charts out
    elsewhere; paths.py is the one place that knows both layouts."""
    found = []
    for module in sorted((ROOT / "generator").rglob("*.py")):
        if module == ROOT / "generator" / "paths.py" or "kubelet" in module.parts:
            continue
        for n, line in enumerate(module.read_text().splitlines(), 1):
            if re.search(r"__file__\)?(\.resolve\(\))?\.(parent|parents)\b", line):
                found.append(f"{module.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_the_bundle_holds_what_the_trainer_image_copies_and_both_charts():
    copied = set()
    for line in paths.TRAINER_DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    kept = {line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert copied <= kept <= set(paths.BUNDLE), (copied, kept)
    assert {"charts/pytorchjob", "charts/pytorch-operator"} <= set(paths.BUNDLE)
    assert paths.SCHEMA.is_relative_to(paths.JOB_CHART)  # the top-level values.schema.json is only a link to it


def test_every_go_module_file_is_package_data():
    """The files of the Go modules that git tracks (generator/controlplane/gomodules/), each matched by a package-data
    glob of pyproject.toml, so `cluster build` from a wheel finds the modules it builds in."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["generator.controlplane"]
    tracked = subprocess.run(["git", "ls-files", "generator/controlplane"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    data = [f.removeprefix("generator/controlplane/") for f in tracked if not f.endswith(".py")]
    assert data, "git lists no Go module files"
    unmatched = [f for f in data if not any(fnmatch.fnmatch(f, g.replace("**/", "*/")) or fnmatch.fnmatch(f, g)
                                            for g in globs)]
    assert unmatched == []
    assert {paths.go_module(name) for name in ("go", "containerd", "coredns", "jobset")} <= {
        (paths.PACKAGE / "controlplane" / f).parent for f in data}


def test_an_installed_package_keeps_its_clusters_in_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCHJOB_KIT_CACHE", str(tmp_path))
    monkeypatch.setattr(paths, "IN_CHECKOUT", False)
    assert paths.cluster_dir() == tmp_path / "cluster"
    monkeypatch.setattr(paths, "IN_CHECKOUT", True)
    assert paths.cluster_dir() == ROOT / ".cache" / "cluster"
