"""How every release `cluster up` installs is installed and waited for: one `helm install` (what a
user would type, its failure told with helm's own words), one readiness wait whose steps share
the deadline of `cluster up --timeout`, and one webhook probe that counts only a webhook's refusal."""
from __future__ import annotations

import json
import stat
import time

import pytest

from generator.controlplane import bringup, build, processes
from generator.controlplane.layout import Layout
from generator.controlplane.releases import base, kueue, operator, trainer
from generator.controlplane.state import ClusterState, InstalledRelease


def test_the_install_is_helm_install_of_the_chart_as_the_release_with_helms_waits_within_the_deadline(tmp_path):
    chart = base.Chart("oci://127.0.0.1:5000/charts/kueue", ("--version", "0.19.2"))
    argv = base.install_argv(kueue.RELEASE, chart, tmp_path / "kueue-values.yaml", 299.2)
    assert argv == [str(build.binary("helm")), "install", "kueue", "oci://127.0.0.1:5000/charts/kueue", "--version", "0.19.2",
                    "--namespace", "kueue-system", "--values", str(tmp_path / "kueue-values.yaml"), "--create-namespace",
                    "--timeout", "300s"]
    # A chart that makes its own namespace: helm must not make it first.
    argv = base.install_argv(trainer.RELEASE, base.Chart("/charts/kubeflow-trainer"), tmp_path / "v.yaml", 1.0,
                             create_namespace=False)
    assert "--create-namespace" not in argv and argv[-2:] == ["--timeout", "1s"]


@pytest.fixture
def fake_helm(tmp_path, monkeypatch):
    """A helm that records its argv, and fails as helm does when FAIL says so."""
    script = tmp_path / "helm"
    script.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/argv"\n'
                      '[ -z "$FAIL" ] || { echo "Error: INSTALLATION FAILED: $FAIL" >&2; exit 1; }\n')
    script.chmod(0o755)
    monkeypatch.setattr(build, "binary", lambda name: script)
    return tmp_path / "argv"


def test_the_install_writes_the_values_for_the_user_alone_and_returns_where_the_release_is(tmp_path, fake_helm):
    layout = Layout(tmp_path / "cluster")
    layout.root.mkdir()
    installed = base.install(layout, kueue.RELEASE, base.Chart("/mod/kueue"), {"a": 1}, time.monotonic() + 60)
    assert installed == InstalledRelease("kueue-system", "kueue-controller-manager", "kueue", "/mod/kueue")
    values = layout.root / "kueue-values.yaml"
    assert values.read_text() == "a: 1\n" and stat.S_IMODE(values.stat().st_mode) == 0o600
    assert fake_helm.read_text().split()[:3] == ["install", "kueue", "/mod/kueue"]


def test_a_failed_install_says_which_release_and_chart_with_helms_message(tmp_path, fake_helm, monkeypatch):
    layout = Layout(tmp_path / "cluster")
    layout.root.mkdir()
    monkeypatch.setenv("FAIL", "cannot re-use a name that is still in use")
    with pytest.raises(RuntimeError) as failed:
        base.install(layout, trainer.RELEASE, base.Chart("/staged/kubeflow-trainer"), {}, time.monotonic() + 60)
    assert str(failed.value) == ("helm install kubeflow-trainer /staged/kubeflow-trainer failed: Error: INSTALLATION "
                                 "FAILED: cannot re-use a name that is still in use")


@pytest.fixture
def waits(monkeypatch):
    """Every wait's timeout and what it waits for, each taking 40 s of a clock that only they move."""
    clock = [1000.0]
    seen: list[tuple[float, str]] = []

    def wait_until(check, timeout, what, child=None, interval=0.25):
        seen.append((timeout, what))
        clock[0] += 40

    monkeypatch.setattr(processes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(processes, "wait_until", wait_until)
    monkeypatch.setattr("generator.controlplane.admin.admin_client", lambda layout: None)
    return clock, seen


def test_a_releases_waits_share_the_deadline_and_name_what_they_wait_for(tmp_path, waits):
    clock, seen = waits
    base.wait_ready(Layout(tmp_path), kueue.RELEASE, None, clock[0] + 100)
    assert seen == [(100, "deployment kueue-system/kueue-controller-manager to be available (its pod run by the kubelet "
                          "and Ready)"),
                    (60, "the API server to reach Kueue's webhooks"),
                    (20, "the API server to serve Kueue's visibility API")]


def test_every_release_cluster_up_waits_for_takes_what_the_one_before_left_of_its_timeout(tmp_path, waits):
    """`cluster up --timeout 200`: the later releases get what is left, never a timeout of their own."""
    clock, seen = waits

    class Sup:
        layout = Layout(tmp_path)
        end = clock[0] + 200  # Supervisor.end: what `cluster up --timeout` leaves the bring-up
        state = ClusterState(operator=InstalledRelease("ops", "my-operator", "training-operator"),
                             trainer=trainer.RELEASE.installed(), kueue=kueue.RELEASE.installed())

        def first_kubelet(self):
            return None

    bringup.releases_ready(Sup())
    assert [round(t) for t, _ in seen] == [200, 160, 120, 80, 40, 1, 1, 1]  # at least one look each, when late
    assert [w.split(" to ")[0] for _, w in seen[:3]] == ["deployment ops/my-operator", "the API server",
                                                         "deployment kubeflow-system/jobset-controller"]
    assert seen[1][1] == "the API server to reach the operator's webhook"
    assert seen[4][1] == "the API server to reach Trainer's and JobSet's webhooks"


class Refusing:
    """The custom objects API answering every create as `status` with `message`, or accepting it."""

    def __init__(self, status: int | None, message: str = ""):
        self.status, self.message, self.created = status, message, []

    def __call__(self, api):
        return self

    def _create(self, *args, **kwargs):
        from kubernetes import client

        self.created.append((args, kwargs))
        if self.status:
            exc = client.ApiException(status=self.status, reason="refused")
            exc.body = json.dumps({"message": self.message})
            raise exc
        return {}

    create_namespaced_custom_object = create_cluster_custom_object = _create


@pytest.mark.parametrize(("status", "message", "answers"), [
    (403, 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: must be 1', True),
    (500, 'Internal error occurred: failed calling webhook "validator.pytorchjob.training-operator.kubeflow.org": '
          'failed to call webhook: Post "https://10.244.7.140:9443/validate": connect: connection refused', False),
    (404, "the server could not find the requested resource", False),  # the CRD not served yet
    (None, "", False),  # let through: the webhook is not registered yet
])
def test_the_webhook_answers_only_when_it_refused_the_dry_run_itself(monkeypatch, status, message, answers):
    from kubernetes import client

    custom = Refusing(status, message)
    monkeypatch.setattr(client, "CustomObjectsApi", custom)
    assert base.webhook_answers(None, operator.PROBE) is answers
    (args, kwargs), = custom.created
    assert args[:4] == ("kubeflow.org", "v1", "default", "pytorchjobs") and kwargs == {"dry_run": "All"}


def test_a_cluster_scoped_probe_is_created_without_a_namespace(monkeypatch):
    from kubernetes import client

    custom = Refusing(403, 'admission webhook "vclusterqueue.kb.io" denied the request')
    monkeypatch.setattr(client, "CustomObjectsApi", custom)
    assert base.webhook_answers(None, kueue.PROBE)
    (args, _), = custom.created
    assert args[:3] == ("kueue.x-k8s.io", "v1beta2", "clusterqueues")
