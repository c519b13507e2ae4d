"""A pod deleted gracefully leaves nothing of its own on the node: its containers are stopped,
the API server is told, and its folder (logs, working directory, output) is removed."""
from __future__ import annotations

import time
from types import SimpleNamespace

from generator.controlplane.kubelet import pod as pods
from tests.support.kubelet_node import Node, ready
from tests.support.waiting import wait_for


def started(tmp_path, deleted: list):
    """A worker whose container has started and logged."""
    node = Node(tmp_path / "cluster", core=SimpleNamespace(
        patch_namespaced_pod_status=lambda *a, **k: None,
        delete_namespaced_pod=lambda name, ns, body: deleted.append((ns, name))))
    node.layout.create()
    node.toolbox.mkdir()
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-1"},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": "busybox", "command": ["sh", "-c", "echo hi; exec sleep 300"]}]}}
    w = ready(pods.PodWorker(node, pod), time.monotonic())
    w._step()
    log = w.log_path(w.main[0], 0)
    wait_for(lambda: "hi" in (log.read_text() if log.exists() else ""), 20, "the container's first line", interval=0.05)
    assert w.folder.is_dir()
    return w, pod


def test_a_deleted_pods_folder_goes_with_it(tmp_path):
    deleted = []
    w, pod = started(tmp_path, deleted)
    w._terminate({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-25T00:00:00Z"}})
    assert deleted == [("default", "p")]
    assert not w.folder.exists()
    assert not w.main[0].running


def test_a_pod_gone_from_the_api_server_leaves_nothing_either(tmp_path):
    deleted = []
    w, pod = started(tmp_path, deleted)
    w.gone = True  # removed without a graceful deletion: nothing to report or delete
    w._terminate(pod)
    assert deleted == [] and not w.folder.exists() and not w.main[0].running


def test_an_exec_probe_runs_as_the_containers_user_whatever_the_container_bound_over_its_helpers(tmp_path):
    import os
    import shutil
    import tempfile
    from pathlib import Path

    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root: the node's containers change user")
    # A restricted container that makes itself a mount namespace of its own (unprivileged user
    # namespaces are on) and binds its own file over the node's helpers there.
    shared = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pjk-probe-"))
    try:
        shared.chmod(0o777)
        fake = shared / "fake"
        fake.write_text(f"#!/bin/sh\necho \"$0 ran as $(id -u)\" >> {shared}/ran\n")
        fake.chmod(0o755)
        binds = " && ".join(f"mount --bind {fake} {tool}" for tool in ("/usr/bin/setpriv", "/usr/bin/nsenter", "/usr/bin/env"))
        restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        node = Node(tmp_path / "cluster", core=SimpleNamespace(patch_namespaced_pod_status=lambda *a, **k: None))
        node.layout.create()
        node.toolbox.mkdir()
        pod = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-1"},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                        "containers": [{"name": "app", "image": "busybox", "securityContext": restricted,
                                        "command": ["unshare", "-Urm", "sh", "-c", f"{binds} && echo bound && exec sleep 300"],
                                        "readinessProbe": {"exec": {"command": ["sh", "-c", "id -u; id -g"]}}}]}}
        w = ready(pods.PodWorker(node, pod), time.monotonic())
        w._step()
        log = w.log_path(w.main[0], 0)
        wait_for(lambda: "bound" in (log.read_text() if log.exists() else ""), 20, "the container's binds", interval=0.05)
        ok, why = w._check(w.main[0], w.main[0].spec["readinessProbe"])
        assert (ok, why) == (True, "command exited 0: 1000\n1000")
        assert not (shared / "ran").exists(), (shared / "ran").read_text()  # no helper of the container's ran
        w._kill_all(1)
    finally:
        shutil.rmtree(shared)
