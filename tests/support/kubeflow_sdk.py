"""The official Kubeflow training SDK (`kubeflow-training` 1.9.4) used as a notebook uses it, for
tests/e2e/test_kubeflow_sdk.py. It runs in a venv of its own (`make e2e` makes it, .venv/kubeflow-sdk)
because the SDK caps the kubernetes client below the one the generator needs; so this file imports
only the SDK and its client, and answers in JSON on stdout.

    python tests/support/kubeflow_sdk.py follow KUBECONFIG NAMESPACE NAME...
    python tests/support/kubeflow_sdk.py create KUBECONFIG NAMESPACE NAME IMAGE ARG...
    python tests/support/kubeflow_sdk.py create-function KUBECONFIG NAMESPACE NAME
"""
from __future__ import annotations

import json
import sys


def training_client(kubeconfig: str, namespace: str):
    from kubeflow.training import TrainingClient
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return TrainingClient(client_configuration=configuration, namespace=namespace)


def follow(sdk, names: list[str]) -> dict:
    """Each job waited for to Succeeded, then what the SDK reads of it."""
    out = {}
    for name in names:
        job = sdk.wait_for_job_conditions(name, wait_timeout=600, polling_interval=2)
        logs, _ = sdk.get_job_logs(name, is_master=False)
        out[name] = {"succeeded": sdk.is_job_succeeded(name),
                     "runPolicy": sdk.api_client.sanitize_for_serialization(job.spec.run_policy),
                     "pods": sorted(sdk.get_job_pod_names(name)), "logs": logs}
    out["listed"] = sorted(j.metadata.name for j in sdk.list_jobs())
    return out


def create(sdk, namespace: str, name: str, image: str, args: list[str]) -> dict:
    """A PyTorchJob written with the SDK's models (a runPolicy with nothing set) and `create_job`."""
    from kubeflow.training import models
    from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec, V1ResourceRequirements

    def replica(count: int):
        return models.KubeflowOrgV1ReplicaSpec(replicas=count, template=V1PodTemplateSpec(spec=V1PodSpec(containers=[
            V1Container(name="pytorch", image=image, args=args,
                        resources=V1ResourceRequirements(requests={"cpu": "100m", "memory": "128Mi"}))])))

    sdk.create_job(job=models.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1", kind="PyTorchJob", metadata=V1ObjectMeta(name=name, namespace=namespace),
        spec=models.KubeflowOrgV1PyTorchJobSpec(run_policy=models.KubeflowOrgV1RunPolicy(),
                                                pytorch_replica_specs={"Master": replica(1), "Worker": replica(1)})))
    return {"created": name}


def sum_of_ranks():
    """A training function as a notebook writes one: the SDK sends its source, run by torchrun."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + 1])
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        print(f"sdk function: {dist.get_world_size()} ranks, sum of ranks {int(total.item())}", flush=True)
    dist.destroy_process_group()


def create_function(sdk, name: str) -> dict:
    """`create_job` with `train_func`: the SDK's own PyTorchJob (its pytorch/pytorch base image,
    `bash -c` with the function's source in a heredoc, then torchrun), 1 Master + 1 Worker."""
    sdk.create_job(name=name, train_func=sum_of_ranks, num_workers=2,
                   resources_per_worker={"cpu": "100m", "memory": "2Gi"})  # torchrun and two torch ranks
    return {"created": name}


def main(argv: list[str]) -> int:
    action, kubeconfig, namespace, *rest = argv
    sdk = training_client(kubeconfig, namespace)
    if action == "follow":
        result = follow(sdk, rest)
    elif action == "create-function":
        result = create_function(sdk, rest[0])
    else:
        name, image, *args = rest
        result = create(sdk, namespace, name, image, args)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
