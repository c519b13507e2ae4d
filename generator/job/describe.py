"""`values`: a job described the way people think of it, turned into chart values."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from generator.errors import Finding, UserError
from generator.job import defaults, images

_TOLERATION = re.compile(r"^(?P<key>[^=:]+)(=(?P<value>[^:]*))?(:(?P<effect>NoSchedule|PreferNoSchedule|NoExecute))?$")


@dataclass
class Description:
    name: str | None = None
    image: str | None = None
    workers: int | None = None
    nproc_per_node: str | None = None
    gpus: int | None = None
    cpu: str | None = None
    memory: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None
    backend: str | None = None
    output_pvc: str | None = None
    output_size: str | None = None
    shm_size: str | None = None
    tolerations: tuple[str, ...] = ()
    node_loss_toleration: int | None = None
    node_selectors: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    env_from_secrets: tuple[str, ...] = ()
    queue: str | None = None
    priority_class: str | None = None
    elastic: str | None = None
    restart_policy: str | None = None
    backoff_limit: int | None = None
    ttl: int | None = None
    deadline: int | None = None
    args: tuple[str, ...] = ()
    target: str | None = None
    sets: list[dict] = field(default_factory=list)


def set_path(values: dict, path: str, value: object) -> None:
    node = values
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def build(d: Description, kind_of, base: dict | None = None) -> dict:
    """Values from flags, laid over a base file; --set wins over both, like Helm's. `kind_of`
    (kinds.for_values) gives the kind the values render, which shapes them before --set."""
    problems: list[Finding] = []
    values = defaults.merge({}, base or {})
    if d.name is not None:
        set_path(values, "job.name", d.name)
    if d.image is not None:
        _set_image(values, d.image, problems)
    simple = [("topology.workers", d.workers), ("topology.nprocPerNode", d.nproc_per_node),
              ("resources.gpus", d.gpus), ("resources.requests.cpu", d.cpu), ("resources.requests.memory", d.memory),
              ("resources.limits.cpu", d.cpu_limit), ("resources.limits.memory", d.memory_limit),
              ("topology.backend", d.backend), ("shm.sizeLimit", d.shm_size), ("kueue.queueName", d.queue),
              ("priorityClassName", d.priority_class), ("restartPolicy", d.restart_policy),
              ("runPolicy.backoffLimit", d.backoff_limit), ("runPolicy.ttlSecondsAfterFinished", d.ttl),
              ("runPolicy.activeDeadlineSeconds", d.deadline), ("nodeLossTolerationSeconds", d.node_loss_toleration)]
    for path, value in simple:
        if value is not None:
            set_path(values, path, value)
    if d.output_pvc and d.output_size:
        problems.append(Finding("--output-pvc", "and --output-size both given", d.output_pvc,
                                "use --output-pvc for an existing claim or --output-size to create one, not both"))
    if d.output_pvc:
        set_path(values, "output.enabled", True)
        set_path(values, "output.existingClaim", d.output_pvc)
    if d.output_size:
        set_path(values, "output.enabled", True)
        set_path(values, "output.size", d.output_size)
    _add_tolerations(values, d.tolerations, problems)
    for i, text in enumerate(d.node_selectors):
        key, sep, value = text.partition("=")
        if not sep or not key:
            problems.append(Finding(f"--node-selector[{i}]", "is not key=value", text, "write e.g. --node-selector pool=gpu"))
            continue
        values.setdefault("nodeSelector", {})[key] = value
    for i, text in enumerate(d.env):
        key, sep, value = text.partition("=")
        if not sep or not key:
            problems.append(Finding(f"--env[{i}]", "is not NAME=VALUE", text, "write e.g. --env NCCL_DEBUG=INFO"))
            continue
        values.setdefault("env", []).append({"name": key, "value": value})
    for secret in d.env_from_secrets:
        values.setdefault("envFrom", []).append({"secretRef": {"name": secret}})
    if d.elastic is not None:
        low, sep, high = d.elastic.partition(":")
        if not sep or not low.isdigit() or not high.isdigit():
            problems.append(Finding("--elastic", "is not MIN:MAX", d.elastic, "write e.g. --elastic 1:4 (Worker counts)"))
        else:
            set_path(values, "elasticPolicy.enabled", True)
            set_path(values, "elasticPolicy.minReplicas", int(low))
            set_path(values, "elasticPolicy.maxReplicas", int(high))
    if d.args:
        values["args"] = list(values.get("args") or []) + list(d.args)
    if d.target:
        values["target"] = d.target
    values = kind_of(values).shape_values(values)
    for extra in d.sets:
        values = defaults.merge(values, extra)
    if problems:
        raise UserError(problems)
    return values


def _set_image(values: dict, image: str, problems: list[Finding]) -> None:
    """--image as image.repository, and image.tag and image.digest where it names them."""
    parsed = images.parse(image)
    if not parsed:
        problems.append(Finding("--image", "is not an image reference", image,
                                "write REPOSITORY[:TAG][@sha256:DIGEST], e.g. ghcr.io/me/train:v1"))
        return
    repository, tag, digest = parsed
    set_path(values, "image.repository", repository)
    if tag:
        set_path(values, "image.tag", tag)
    if digest:
        set_path(values, "image.digest", digest)


def _add_tolerations(values: dict, tolerations: tuple[str, ...], problems: list[Finding]) -> None:
    """Each --toleration (key=value:Effect or key:Effect) after the tolerations the values have."""
    for i, text in enumerate(tolerations):
        match = _TOLERATION.match(text)
        if not match:
            problems.append(Finding(f"--toleration[{i}]", "is not a toleration", text,
                                    "write key=value:Effect or key:Effect (Effect: NoSchedule, PreferNoSchedule, NoExecute)"))
            continue
        toleration = {"key": match["key"], "operator": "Equal" if match["value"] is not None else "Exists"}
        if match["value"] is not None:
            toleration["value"] = match["value"]
        if match["effect"]:
            toleration["effect"] = match["effect"]
        values.setdefault("tolerations", []).append(toleration)
