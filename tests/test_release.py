"""A release: one version everywhere, recorded in CHANGELOG.md."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT, release


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

