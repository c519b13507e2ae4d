"""The project's charts as OCI artifacts in the registry on this machine: packaged and pushed by
the helm CLI with the registry's client certificate, once per version and content, and installed
from there as `helm install NAME oci://127.0.0.1:PORT/charts/pytorch-operator --version V`. A helm
that records what it is asked here; the real one pushes and installs in `make e2e`."""
from __future__ import annotations

import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from generator import paths
from generator.controlplane import build, oci_charts, registry
from generator.controlplane.releases import operator
from generator.errors import UserError
from generator.images.registry import Registry

V = oci_charts.version(paths.OPERATOR_CHART)  # both charts' (tests/test_release.py keeps them one)


@dataclass(frozen=True)
class Running(Registry):
    """The registry as running on port 5000, holding what `held` says."""
    held: set = field(default_factory=set)

    @property
    def address(self) -> str:
        return "127.0.0.1:5000"

    def has(self, name: str) -> str:
        return "sha256:" + "a" * 64 if name in self.held else ""


@pytest.fixture
def reg(tmp_path) -> Running:
    reg = Running(tmp_path / "registry")
    reg.root.mkdir()
    return reg


def test_the_charts_are_packaged_and_pushed_by_helm_with_the_registrys_client_certificate(reg, tmp_path):
    helm = str(build.binary("helm"))
    assert oci_charts.package_argv(paths.OPERATOR_CHART, tmp_path) == [
        helm, "package", str(paths.OPERATOR_CHART), "--destination", str(tmp_path)]
    certs = reg.root / "certs.d"
    assert oci_charts.push_argv(tmp_path / f"pytorch-operator-{V}.tgz", reg) == [
        helm, "push", str(tmp_path / f"pytorch-operator-{V}.tgz"), "oci://127.0.0.1:5000/charts",
        "--cert-file", str(certs / "client.cert"), "--key-file", str(certs / "client.key"), "--ca-file", str(certs / "ca.crt")]


def test_the_operator_is_installed_from_the_registry_by_name_and_version_as_a_user_installs_a_chart(reg, monkeypatch):
    monkeypatch.setattr(registry, "default", lambda: reg)
    chart = operator.chart()
    assert chart.ref == "oci://127.0.0.1:5000/charts/pytorch-operator"
    assert chart.flags == ("--version", V, *oci_charts.tls_flags(reg))
    assert oci_charts.names() == [f"charts/pytorch-operator:{V}", f"charts/pytorchjob:{V}"]


def test_without_a_running_registry_the_install_says_how_to_start_it(tmp_path):
    with pytest.raises(UserError, match=r"the registry in .* is not running, and the charts are installed from it: run "
                                        r"`python -m generator image registry up`"):
        oci_charts.source(Registry(tmp_path / "registry"), paths.OPERATOR_CHART)


@pytest.fixture
def fake_helm(tmp_path, monkeypatch, reg):
    """A helm whose `package` writes NAME-VERSION.tgz and whose `push` records the archive's chart in `reg.held`."""
    calls: list[list[str]] = []

    def run(argv, env, **_options):
        import subprocess

        calls.append(argv)
        assert env["HELM_CONFIG_HOME"] == str(reg.root / "helm" / "config")  # not the user's ~/.config/helm
        if argv[1] == "package":
            chart, into = Path(argv[2]), Path(argv[4])
            with tarfile.open(into / f"{chart.name}-{oci_charts.version(chart)}.tgz", "w:gz") as tar:
                tar.add(chart, arcname=chart.name)
        elif argv[1] == "push":
            assert Path(argv[2]).is_file()
            reg.held.add("charts/" + Path(argv[2]).name.removesuffix(".tgz").replace(f"-{V}", f":{V}"))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(oci_charts.subprocess, "run", run)
    return calls


def test_each_chart_is_pushed_once_and_again_only_when_its_files_change_or_the_registry_lost_it(reg, fake_helm, tmp_path):
    charts = tmp_path / "charts"
    for chart in oci_charts.CHARTS:
        shutil.copytree(chart, charts / chart.name)
    mine = (charts / "pytorch-operator", charts / "pytorchjob")
    said: list[str] = []
    assert oci_charts.publish(reg, said.append, mine) == [f"charts/pytorch-operator:{V}", f"charts/pytorchjob:{V}"]
    assert [c[1] for c in fake_helm] == ["package", "push", "package", "push"]
    assert said[0] == f"pushing the chart pytorch-operator {V} to oci://127.0.0.1:5000/charts"
    assert oci_charts.publish(reg, said.append, mine) == []  # held as made from these files: nothing to do
    assert len(fake_helm) == 4 and len(said) == 2
    # A checkout's edit of the chart without a new version: the registry gets the edited chart.
    values = charts / "pytorchjob" / "values.yaml"
    values.write_text(values.read_text().replace("# ", "#-", 1))  # one character: the same size
    assert oci_charts.publish(reg, said.append, mine) == [f"charts/pytorchjob:{V}"]
    reg.held.discard(f"charts/pytorch-operator:{V}")  # its storage emptied by hand
    assert oci_charts.publish(reg, said.append, mine) == [f"charts/pytorch-operator:{V}"]


def test_a_failed_push_is_told_with_helms_words_and_the_registrys_log_and_is_not_recorded(reg, fake_helm, monkeypatch):
    import subprocess

    recorded = oci_charts.subprocess.run
    monkeypatch.setattr(oci_charts.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 1, "", "Error: unexpected status from HEAD request: 400 Bad Request\n") if argv[1] == "push" else recorded(argv, **kw))
    with pytest.raises(UserError) as failed:
        oci_charts.publish(reg, lambda line: None, (paths.JOB_CHART,))
    assert str(failed.value) == (f"pushing pytorchjob-{V}.tgz to the registry at 127.0.0.1:5000 failed: Error: unexpected "
                                 f"status from HEAD request: 400 Bad Request; the registry's log is {reg.log}")
    assert not registry.held_from(reg, f"charts/pytorchjob:{V}", oci_charts.digest(paths.JOB_CHART))
    assert not list(reg.root.glob(".chart-*"))  # the packaged archive goes with its temporary folder
