"""The process kubelet: the node of `generator cluster up --node process` (and where the real node
cannot run), on a cluster of this module's own, offering one GPU. What is the process node's own: the
machine's CPUs and memory and the GPUs asked for on its Node, its heartbeat, its message for an image
it has no map for, its refusal of a hostPath outside its volumes folder and of an image it was not
started with, the securityContext it enforces itself (a root user refused, another pod's token
hidden, probes run as the user, no helper of the node's run from a pod's PATH), and the operator's
`helm test` through it. Jobs and pods on any node are in test_jobs, on the shared cluster's node."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from generator.controlplane import network
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def node_options() -> list[str]:
    # The process node's own module, on a cluster of its own (the shared one runs the node `cluster
    # up` chooses): a node offering one GPU, with the operator alone (TrainJobs run in test_jobs).
    return ["--node", "process", "--gpus", "1"]


def events(cluster, name: str, namespace: str = "default") -> list:
    return cluster.core().list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def log_of(cluster, pod: str, container: str | None = None, namespace: str = "default", **options) -> str:
    return cluster.core().read_namespaced_pod_log(pod, namespace, container=container, **options) or ""


def pod_network(cluster) -> network.PodNetwork:
    return network.PodNetwork(**json.loads((cluster.dir / "state.json").read_text())["pod_network"])


# --- the node --------------------------------------------------------------------------------
def test_the_node_offers_this_machine_and_the_gpus_asked_for(cluster):
    (node,) = cluster.core().list_node().items
    memory_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:"))
    assert node.status.capacity["cpu"] == str(os.cpu_count())
    assert node.status.capacity["memory"] == f"{memory_kib}Ki"
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    assert {(c.type, c.status) for c in node.status.conditions} >= {("Ready", "True"), ("MemoryPressure", "False")}
    # The node is the bridge's gateway, and its pods take their IPs from the bridge's /24.
    assert [(a.type, a.address) for a in node.status.addresses][0] == ("InternalIP", pod_network(cluster).gateway)
    assert node.spec.pod_cidr == pod_network(cluster).cidr
    assert not node.spec.taints  # the node lifecycle controller found it healthy


def test_the_heartbeat_lease_is_renewed(cluster):
    from kubernetes import client

    leases = client.CoordinationV1Api(cluster.api())
    (node,) = cluster.core().list_node().items
    first = leases.read_namespaced_lease(node.metadata.name, "kube-node-lease").spec.renew_time
    wait_for(lambda: leases.read_namespaced_lease(node.metadata.name, "kube-node-lease").spec.renew_time > first, 30,
             "the node's Lease to be renewed")


# --- single pods -----------------------------------------------------------------------------
def _pod(cluster, name: str, spec: dict) -> None:
    cluster.core().create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                                     "spec": spec})


def _gone(cluster, name: str) -> None:
    from kubernetes import client

    try:
        cluster.core().delete_namespaced_pod(name, "default", grace_period_seconds=1)
    except client.ApiException:
        pass


def test_an_unknown_image_fails_like_an_image_pull(cluster):
    _pod(cluster, "unknown-image", {"containers": [{"name": "app", "image": "example.com/team/app:1.0"}]})
    try:
        state = wait_for(lambda: (cluster.core().read_namespaced_pod("unknown-image", "default").status.container_statuses
                                  or [None])[0], 60, "a container status")
        waiting = wait_for(lambda: cluster.core().read_namespaced_pod("unknown-image", "default")
                           .status.container_statuses[0].state.waiting, 60, "the waiting state")
        assert state.name == "app" and waiting.reason in ("ErrImagePull", "ImagePullBackOff")
        assert 'image "example.com/team/app:1.0" cannot run on this machine' in waiting.message
        assert "ghcr.io/pytorchjob-kit/trainer" in waiting.message and "--image example.com/team/app=" in waiting.message
        failed = [e for e in events(cluster, "unknown-image") if e.reason == "Failed"]
        assert any("Failed to pull image" in e.message for e in failed)
    finally:
        _gone(cluster, "unknown-image")


def test_a_host_path_is_refused_by_pod_security_and_outside_the_volumes_folder_by_the_node(cluster):
    from kubernetes import client

    core = cluster.core()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "host-etc"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "sh", "image": "busybox:1.36", "command": ["cat", "/host/shadow"],
                                                  "volumeMounts": [{"name": "etc", "mountPath": "/host"}]}],
        "volumes": [{"name": "etc", "hostPath": {"path": "/etc"}}]}}
    # `cluster up` enforces PodSecurity baseline wherever a namespace sets no level of its own.
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod("default", pod)
    assert refused.value.status == 403
    assert 'violates PodSecurity "baseline:latest": hostPath volumes' in json.loads(refused.value.body)["message"]
    # A namespace an admin opened up still gets nothing outside the cluster's volumes folder from the node.
    core.create_namespace({"metadata": {"name": "host-paths",
                                        "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    try:
        core.create_namespaced_pod("host-paths", pod)
        failed = wait_for(lambda: [e for e in events(cluster, "host-etc", "host-paths") if e.reason == "FailedMount"],
                          60, "the FailedMount event")
        assert 'hostPath volume "etc": "/etc" is outside' in failed[0].message
        assert f"{cluster.dir / 'volumes'}, the only host folder this node mounts" in failed[0].message
        assert core.read_namespaced_pod("host-etc", "host-paths").status.phase == "Pending"
    finally:
        core.delete_namespace("host-paths")


def test_cluster_up_again_refuses_an_image_the_running_node_was_not_started_with(cluster, tmp_path):
    """The node's image map is kept in state.json as the node starts; `cluster up` reads it there."""
    kept = json.loads((cluster.dir / "state.json").read_text())["node_options"]
    assert kept["gpus"] == 1 and kept["images"]  # the operator chart's images, mapped by the node step
    again = cluster.cli("cluster", "up", "--dir", str(cluster.dir), "--gpus", "1", "--image",
                        f"registry.example.com/ml/toy={tmp_path}")
    assert again.returncode == 1, again.stderr
    assert (f"its node was started without --image registry.example.com/ml/toy={tmp_path}; a node's images are fixed "
            "when it starts") in again.stderr


# --- securityContext: what the process node enforces itself ------------------------------------
def _sh_pod(name: str, command: str, security: dict | None = None, pod_security: dict | None = None) -> dict:
    container = {"name": "main", "image": "busybox", "command": ["sh", "-c", command]}
    if security:
        container["securityContext"] = security
    spec = {"restartPolicy": "Never", "containers": [container], "terminationGracePeriodSeconds": 1}
    if pod_security:
        spec["securityContext"] = pod_security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def delete(core, name: str) -> None:
    from kubernetes.client import ApiException

    try:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _phase(cluster, name: str) -> str:
    return cluster.core().read_namespaced_pod(name, "default").status.phase


def test_run_as_non_root_with_a_root_user_is_refused_as_on_a_cluster(cluster):
    core = cluster.core()
    core.create_namespaced_pod("default", _sh_pod("sec-root", "true", pod_security={"runAsNonRoot": True, "runAsUser": 0}))
    try:
        def waiting():
            statuses = core.read_namespaced_pod("sec-root", "default").status.container_statuses or []
            return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason
        wait_for(lambda: waiting() == "CreateContainerConfigError", 60, "CreateContainerConfigError")
        messages = [e.message for e in events(cluster, "sec-root")]
        assert any("container's runAsUser breaks non-root policy" in m for m in messages), messages
    finally:
        delete(core, "sec-root")


def test_a_container_reads_its_own_token_but_not_another_pods(cluster):
    core = cluster.core()
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    core.create_namespaced_pod("default", _sh_pod("sec-a", "sleep 300"))
    try:
        wait_for(lambda: _phase(cluster, "sec-a") == "Running", 60, "sec-a to run")
        uid = core.read_namespaced_pod("sec-a", "default").metadata.uid
        other = cluster.dir / "kubelet" / "pods" / f"default_sec-a_{uid}"
        theirs = next(other.glob("volumes/kube-api-access-*/token"))
        core.create_namespaced_pod("default", _sh_pod(
            "sec-b", f"test -s {token} && echo own-token-read; cat {theirs} >/dev/null 2>&1 && echo other-read || "
                     "echo other-hidden; id -u",
            security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            pod_security={"runAsUser": 1000, "runAsNonRoot": True}))
        wait_for(lambda: _phase(cluster, "sec-b") in ("Succeeded", "Failed"), 60, "sec-b to finish")
        time.sleep(0.5)
        assert log_of(cluster, "sec-b").split() == ["own-token-read", "other-hidden", "1000"]
    finally:
        for name in ("sec-a", "sec-b"):
            delete(core, name)


def test_an_exec_probe_runs_as_the_containers_user(cluster):
    core = cluster.core()
    pod = _sh_pod("sec-probe", "sleep 300", pod_security={"runAsUser": 1000, "runAsGroup": 1000})
    pod["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["sh", "-c", 'test "$(id -u)" = 1000']},
                                                      "periodSeconds": 1}
    core.create_namespaced_pod("default", pod)
    try:
        wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in
                             core.read_namespaced_pod("sec-probe", "default").status.conditions or []), 60,
                 "the probe, run as uid 1000, to pass")
    finally:
        delete(core, "sec-probe")


HELPERS = ("nsenter", "unshare", "sh", "mount", "mkdir", "touch", "setpriv", "env", "printf", "python3", "id", "true")


def test_a_restricted_pod_gets_no_program_on_its_path_run_as_root(cluster):
    """A pod PodSecurity `restricted` admits, whose PATH starts with a folder it could write (here
    one of this machine's, made for the test): every program the node might look up there is a fake
    that writes who ran it. Only the container's own program may run, as its user."""
    import shutil
    import tempfile

    from kubernetes import client

    core = cluster.core()
    fakes = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pjk-fakes-"))
    namespace = "sec-restricted"
    try:
        fakes.chmod(0o777)
        for name in HELPERS:
            (fakes / name).write_text(f"#!/bin/sh\necho \"{name} $(/usr/bin/id -u)\" >> {fakes}/ran\n")
            (fakes / name).chmod(0o755)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"})))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fakes", "namespace": namespace},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "containers": [{"name": "main", "image": "busybox", "command": ["true"],
                                        "env": [{"name": "PATH", "value": f"{fakes}:/usr/bin:/bin"}],
                                        "volumeMounts": [{"name": "scratch", "mountPath": "/var/run/scratch"}],
                                        "securityContext": {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}}]}}
        core.create_namespaced_pod(namespace, pod)  # admitted: it meets `restricted`

        def phase() -> str:
            return core.read_namespaced_pod("fakes", namespace).status.phase

        wait_for(lambda: phase() in ("Succeeded", "Failed"), 60, "the pod to finish")
        assert phase() == "Succeeded"
        assert (fakes / "ran").read_text() == "true 1000\n"  # its own program, as its user; no helper of the node's
    finally:
        core.delete_namespace(namespace, grace_period_seconds=0)
        shutil.rmtree(fakes)


# --- the operator's Helm release ---------------------------------------------------------------
def test_the_operator_is_a_helm_release_whose_helm_test_passes_on_the_node(cluster):
    listed = json.loads(cluster.helm("list", "-A", "-o", "json").stdout)
    assert [(r["name"], r["namespace"], r["status"], r["chart"]) for r in listed] == [
        ("training-operator", "kubeflow", "deployed", "pytorch-operator-0.1.0")]
    # The test pod (curl against the operator's metrics Service) runs through the process kubelet.
    tested = cluster.helm("test", "training-operator", "-n", "kubeflow")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Phase:          Succeeded" in tested.stdout
