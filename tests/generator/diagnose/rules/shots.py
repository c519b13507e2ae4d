"""Snapshots for diagnose's rule tests, built from recorded API objects: what the scheduler, the kubelet, the operator, Kueue
and Volcano write (their message formats), for causes the local control plane cannot produce
or produces only slowly. tests/e2e/test_jobs.py diagnoses real jobs."""
from __future__ import annotations

from generator.diagnose.snapshot import Snapshot

NOW = "2026-11-23T10:30:00Z"


def job(name="mnist", conditions=("Created",), run_policy=None, labels=None, gpus=0) -> dict:
    def spec(role, replicas):
        container = {"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0",
                     "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}
        if gpus:
            container["resources"]["limits"]["nvidia.com/gpu"] = gpus
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "uid": "job-uid", "creationTimestamp": "2026-11-23T10:00:00Z",
                         "labels": labels or {}},
            "spec": {"runPolicy": run_policy or {}, "pytorchReplicaSpecs": {"Master": spec("Master", 1),
                                                                              "Worker": spec("Worker", 2)}},
            "status": {"conditions": [{"type": c, "status": "True", "reason": f"PyTorchJob{c}", "message": f"job {c}"}
                                      for c in conditions]}}


def pod(name, role, phase="Running", statuses=None, init=None, conditions=None, spec=None, annotations=None) -> dict:
    index = name.rsplit("-", 1)[1]
    base_spec = {"containers": [{"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0",
                                 "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}],
                 "nodeName": "node-a" if phase != "Pending" else None}
    base_spec.update(spec or {})
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations or {},
                         "labels": {"training.kubeflow.org/job-name": "mnist", "training.kubeflow.org/replica-type": role,
                                    "training.kubeflow.org/replica-index": index}},
            "spec": base_spec,
            "status": {"phase": phase, "conditions": conditions or [],
                       "containerStatuses": statuses if statuses is not None else [running("pytorch")],
                       **({"initContainerStatuses": init} if init else {})}}


def running(name, started="2026-11-23T10:01:00Z", restarts=0, last=None) -> dict:
    return {"name": name, "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0", "ready": True, "restartCount": restarts,
            "state": {"running": {"startedAt": started}}, "lastState": last or {}}


def unschedulable(message) -> list[dict]:
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]


def event(kind, name, reason, message, type_="Warning") -> dict:
    return {"involvedObject": {"kind": kind, "name": name, "namespace": "ml"}, "reason": reason, "message": message,
            "type": type_, "lastTimestamp": "2026-11-23T10:02:00Z"}


def shot(**fields) -> Snapshot:
    base = {"job": job(), "pods": [pod("mnist-master-0", "Master"), pod("mnist-worker-0", "Worker"),
                                    pod("mnist-worker-1", "Worker")],
            "nodes": [{"metadata": {"name": "node-a", "labels": {}}, "spec": {"taints": []},
                       "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}}],
            "services": ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"], "now": NOW}
    base.update(fields)
    return Snapshot(**base)


def only(findings, reason):
    chosen = [f for f in findings if f.reason == reason]
    assert len(chosen) == 1, [(f.reason, f.object) for f in findings]
    return chosen[0]
