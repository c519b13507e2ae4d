"""Kubeflow Trainer v2.3 for the end-to-end tests, without its controller: its CRDs from
../shared, and what its controller and JobSet write for a TrainJob, in the shapes a Trainer v2.3
cluster records. The Indexed Job is a real batch/v1 Job, so the real Job controller makes the
pods (<job>-node-0-<i>-<suffix>, hostname <job>-node-0-<i>, JOB_COMPLETION_INDEX) and the
process node runs them; only the JobSet layer between the TrainJob and its Job is left out."""
from __future__ import annotations

import copy
import time

import pytest
import yaml

from generator.job import runtime
from tests.support import REFERENCE

GROUP, VERSION = runtime.GROUP, "v1alpha1"
PORT = runtime.MASTER_PORT
COMPLETION = "batch.kubernetes.io/job-completion-index"
# The reasons and messages Trainer copies from its JobSet's terminal conditions.
COMPLETE = ("Complete", "AllJobsCompleted", "jobset completed successfully")
FAILED = ("Failed", "FailedJobs", "jobset failed due to one or more job failures")


def install_crds(api) -> None:
    """TrainJob, TrainingRuntime and ClusterTrainingRuntime, Established; skips without ../shared."""
    from kubernetes import client

    folder = REFERENCE / "trainer-v2.3.0"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent: Trainer's CRDs come from ../shared")
    extensions = client.ApiextensionsV1Api(api)
    for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes"):
        crd = yaml.safe_load((folder / f"trainer.kubeflow.org_{plural}.yaml").read_text())
        try:
            extensions.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            assert exc.status == 409, exc.body  # another test installed it
        wait = time.monotonic() + 60
        while not any(c.type == "Established" and c.status == "True" for c in
                      extensions.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []):
            assert time.monotonic() < wait, f"{crd['metadata']['name']} was not Established"
            time.sleep(0.5)


def start_nodes(api, namespace: str, name: str) -> None:
    """The node Job and headless Service JobSet makes for TrainJob `name` (as Trainer's torch
    plugin fills them: the PET_* env, port 29500), owned by the TrainJob so that deleting it
    takes them away."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
    objects = [job]
    ref = job["spec"]["runtimeRef"]
    if ref.get("kind") == "TrainingRuntime":
        objects.append(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", ref["name"]))
    resolved = runtime.resolve(objects)
    owner = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "name": name, "uid": job["metadata"]["uid"],
              "controller": True, "blockOwnerDeletion": True}]
    labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "node",
              "jobset.sigs.k8s.io/job-index": "0", "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    pod = copy.deepcopy(resolved.pod)
    pod.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    spec = pod["spec"]
    spec["subdomain"] = name
    node = spec["containers"][0]
    node["ports"] = [{"containerPort": PORT}]
    node["env"] = (node.get("env") or []) + [
        {"name": "PET_NNODES", "value": str(resolved.nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": resolved.nproc},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION}']"}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(PORT)}]
    client.CoreV1Api(api).create_namespaced_service(namespace, {
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
        "spec": {"clusterIP": "None", "selector": {"jobset.sigs.k8s.io/jobset-name": name},
                 "publishNotReadyAddresses": True}})
    client.BatchV1Api(api).create_namespaced_job(namespace, {
        "metadata": {"name": f"{name}-node-0", "labels": labels, "ownerReferences": owner},
        "spec": {"completionMode": "Indexed", "completions": resolved.nodes, "parallelism": resolved.nodes,
                 "backoffLimit": resolved.node_backoff_limit, "template": pod}})


def record(api, namespace: str, name: str, timeout: float = 600) -> str:
    """Waits for the node Job to end and writes the TrainJob's status as Trainer would: its
    jobsStatus and the Complete or Failed condition. The condition type written."""
    from kubernetes import client

    batch = client.BatchV1Api(api)
    end = time.monotonic() + timeout
    while True:
        job = batch.read_namespaced_job(f"{name}-node-0", namespace)
        done = {c.type for c in job.status.conditions or [] if c.status == "True"} & {"Complete", "Failed"}
        if done:
            break
        assert time.monotonic() < end, f"the node Job of {name} did not end in {timeout:g}s"
        time.sleep(1)
    ctype, reason, message = COMPLETE if "Complete" in done else FAILED
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"conditions": [{"type": ctype, "status": "True", "reason": reason, "message": message,
                              "lastTransitionTime": now}],
              "jobsStatus": [{"name": "node", "active": 0, "ready": 0, "suspended": 0,
                              "succeeded": int(ctype == "Complete"), "failed": int(ctype == "Failed")}]}
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "trainjobs", name,
                                                                       {"status": status})
    return ctype
