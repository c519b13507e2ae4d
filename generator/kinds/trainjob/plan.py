"""A TrainJob on this machine: its nodes alike, each one replica (a process, or a container: its
backend's) running torchrun with only the PET_* variables Trainer's torch plugin sets, under JobSet's policy."""
from __future__ import annotations

from pathlib import Path

from generator.kinds.trainjob import runtime
from generator.kinds.trainjob.contract import JobSetPolicy
from generator.local import backends
from generator.local.backends.base import Backend
from generator.local.plan import Plan, check_pods
from generator.local.pods import Placement, Pod, checked, replica


def plan(objects: list[dict], run_dir: Path, namespace: str = "default", backend: Backend | None = None) -> Plan:
    """A Trainer v2 TrainJob (its runtime beside it, or upstream's torch-distributed). The nodes meet
    where `backend` (default: processes) puts node 0's name under JobSet's headless Service and port
    29500."""
    resolved = runtime.resolve(objects)
    check_pods(resolved.nodes, "spec.trainer.numNodes", resolved.nodes, resolved.name)

    def dns(i: int) -> str:  # JobSet's pods: hostname <job>-node-0-<i> under the headless Service <job>
        return f"{resolved.name}-node-0-{i}.{resolved.name}"

    backend = backend or backends.default()
    port, master = backend.port(runtime.MASTER_PORT), backend.address(dns(0))
    placement = Placement(run_dir, namespace, backend)
    spec = resolved.pod["spec"]
    replicas = []
    for i in range(resolved.nodes):
        # As the torch plugin and the Indexed Job set them; the Master's address is node 0's.
        env = {**runtime.plugin_env(resolved.nodes, resolved.nproc, i, master, port), "JOB_COMPLETION_INDEX": str(i),
               "PYTHONUNBUFFERED": "1"}
        replicas.append(replica(Pod(resolved.name, f"node-0-{i}", "Node", i, spec["restartPolicy"], spec, runtime.CONTAINER,
                                    f"{resolved.runtime} node pod.spec", hostname=f"{resolved.name}-node-0-{i}",
                                    dns=dns(i)), env, placement))
    notes = checked(replicas, placement.problems, placement.notes, resolved.name)
    return Plan(resolved.name, run_dir, replicas, JobSetPolicy(resolved.node_backoff_limit, resolved.max_set_restarts),
                resolved.active_deadline, notes, backend=backend)
