"""A PyTorchJob on this machine: one replica per pod (a process, or a container: its backend's), a
Master and Workers with the env the operator injects, run under the operator's policy."""
from __future__ import annotations

from pathlib import Path

from generator.kinds.pytorchjob import admission
from generator.kinds.pytorchjob.contract import JobEnv, OperatorPolicy, operator_env
from generator.local import backends
from generator.local.backends.base import Backend
from generator.local.plan import Plan, Replica, check_pods
from generator.local.pods import Placement, Pod, checked, main_container, replica

DEFAULT_PORT, PORT_NAME = 23456, "pytorchjob-port"  # the operator's Master port, unless the container names one


def plan(job: dict, run_dir: Path, namespace: str = "default", backend: Backend | None = None) -> Plan:
    """Raises UserError for what cannot run here (a Secret value that is not in the shell, an image
    this machine does not have, ...). The pods meet where `backend` (default: processes) puts the
    operator's names and ports: the Master's Service and its pytorchjob-port, elastic rendezvous at
    Worker 0's."""
    name = job["metadata"]["name"]
    spec = job["spec"]
    specs = spec["pytorchReplicaSpecs"]
    nproc = str(spec.get("nprocPerNode") or admission.DEFAULT_NPROC_PER_NODE)
    per_pod = int(nproc) if nproc.isdigit() else 1
    order = [("Master", 1)] if "Master" in specs else []
    if "Worker" in specs:
        order.append(("Worker", int(specs["Worker"].get("replicas", 1))))
    pods = sum(n for _, n in order)
    check_pods(pods, "spec.pytorchReplicaSpecs.Worker.replicas", pods - 1)
    elastic = spec.get("elasticPolicy")
    backend = backend or backends.default()
    main = main_container(specs[order[0][0]]["template"]["spec"], admission.CONTAINER)
    port = backend.port(next((int(p["containerPort"]) for p in main.get("ports") or [] if p.get("name") == PORT_NAME),
                             DEFAULT_PORT))
    rdzv_port = backend.port(int(elastic.get("rdzvPort") or port)) if elastic else None
    # As the operator names its Services: one per replica; elastic rendezvous at Worker 0's.
    master, rdzv = backend.address(f"{name}-master-0"), f"{backend.address(f'{name}-worker-0')}:{rdzv_port}"
    job_env = JobEnv(pods, per_pod, nproc, port, elastic, has_master="Master" in specs, rdzv=rdzv, master=master)
    placement = Placement(run_dir, namespace, backend)
    replicas: list[Replica] = []
    rank = 0
    for role, count in order:
        rspec = specs[role]
        pod_spec = rspec["template"]["spec"]
        where = f"spec.pytorchReplicaSpecs.{role}.template.spec"
        for i in range(count):
            env = operator_env(job_env, rank)
            pod = f"{role.lower()}-{i}"
            replicas.append(replica(Pod(name, pod, role, rank, rspec.get("restartPolicy") or admission.DEFAULT_RESTART_POLICY,
                                        pod_spec, admission.CONTAINER, where, rspec["template"].get("metadata") or {},
                                        hostname=f"{name}-{pod}", dns=f"{name}-{pod}"),
                                    env, placement))
            rank += 1
    notes = checked(replicas, placement.problems, placement.notes, name)
    run_policy = spec.get("runPolicy") or {}
    policy = OperatorPolicy(run_policy.get("backoffLimit"), "Master" in specs, elastic is not None)
    return Plan(name, run_dir, replicas, policy, run_policy.get("activeDeadlineSeconds"), notes, backend=backend)
