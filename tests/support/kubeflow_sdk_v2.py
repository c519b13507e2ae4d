"""The Kubeflow SDK for Trainer v2 (`kubeflow` 0.5, its TrainerClient) used as a notebook uses it,
for tests/e2e/test_kubeflow_sdk_v2.py. It runs in a venv of its own (`make e2e` makes it,
.venv/kubeflow-sdk-v2), as it caps the kubernetes client below the one the generator needs; so
this file imports only the SDK and its client, and answers in JSON on stdout.

    python tests/support/kubeflow_sdk_v2.py follow KUBECONFIG NAMESPACE NAME...
    python tests/support/kubeflow_sdk_v2.py train KUBECONFIG NAMESPACE
    python tests/support/kubeflow_sdk_v2.py delete KUBECONFIG NAMESPACE NAME
"""
from __future__ import annotations

import json
import logging
import sys


class Warnings(logging.Handler):
    """What the SDK logs as a warning (a missing kubeflow-trainer-public ConfigMap, a runtime
    without its framework label), kept for the test to see."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def trainer_client(kubeconfig: str, namespace: str):
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    return TrainerClient(backend_config=KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig))


def read(sdk, name: str) -> dict:
    """What get_job says of a job, and each node's log through get_job_logs."""
    job = sdk.get_job(name)
    steps = [{"name": s.name, "status": s.status, "pod": s.pod_name, "device": s.device, "count": s.device_count}
             for s in sorted(job.steps, key=lambda s: s.name)]
    return {"status": job.status, "nodes": job.num_nodes, "runtime": job.runtime.name, "steps": steps,
            "logs": {s["name"]: list(sdk.get_job_logs(name, step=s["name"])) for s in steps}}


def follow(sdk, names: list[str]) -> dict:
    """Each job waited for to Complete, then read back; and the namespace's jobs as list_jobs lists them."""
    out = {}
    for name in names:
        sdk.wait_for_job_status(name, timeout=600, polling_interval=2)
        out[name] = read(sdk, name)
    out["listed"] = sorted(j.name for j in sdk.list_jobs())
    return out


def train(sdk) -> dict:
    """A training function as a notebook sends one: `train` with a CustomTrainer on upstream's
    torch-distributed runtime (its pytorch/pytorch image; the SDK writes the function's source
    from a heredoc and starts it with torchrun), two nodes; the SDK names the job itself."""
    from kubeflow.trainer import CustomTrainer
    from kubeflow_sdk import sum_of_ranks  # the v1 SDK's training function (this folder): one source for both

    name = sdk.train(runtime="torch-distributed", trainer=CustomTrainer(
        func=sum_of_ranks, num_nodes=2, resources_per_node={"cpu": "500m", "memory": "2Gi"}))  # torchrun and a torch rank
    sdk.wait_for_job_status(name, timeout=600, polling_interval=2)
    return {"name": name, **read(sdk, name)}


def main(argv: list[str]) -> int:
    action, kubeconfig, namespace, *rest = argv
    warnings = Warnings()
    logging.getLogger("kubeflow").addHandler(warnings)
    sdk = trainer_client(kubeconfig, namespace)
    if action == "follow":
        result = follow(sdk, rest)
    elif action == "train":
        result = train(sdk)
    else:
        sdk.delete_job(rest[0])
        result = {"deleted": rest[0]}
    json.dump({**result, "warnings": warnings.seen}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
