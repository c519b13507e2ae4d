"""Everything diagnose looks at for one job, read once from the API as plain objects (the JSON
the API server sends): the PyTorchJob or TrainJob (with its runtime), its pods and their events,
its PodGroup or Kueue Workload, the claims, Secrets and ConfigMaps its pods name, the nodes, and
the last log lines of containers that failed. What the user may not read (nodes, other kinds) is
left out, not fatal. A snapshot saved with `--save` reads back as the same object."""
from __future__ import annotations

import datetime
import re
from dataclasses import asdict, dataclass, field

from generator import kinds
from generator.cluster import client as api
from generator.diagnose import reads, scheduling
from generator.job.imports import KUEUE_LABEL
from generator.kinds.base import JobKind

LOG_LINES = 20
# torchrun's own report of a failed worker (a traceback and a box) follows the worker's output and
# would fill the last lines: read further back, and put the report's one fact in its place.
LAUNCHER_LINES = 200
CHILD_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"


@dataclass
class Snapshot:
    job: dict
    pods: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    nodes: list[dict] | None = None  # None: not readable with these credentials
    claims: dict[str, dict | None] = field(default_factory=dict)  # name -> the claim, None when missing
    secrets: dict[str, bool] = field(default_factory=dict)  # name -> exists
    config_maps: dict[str, bool] = field(default_factory=dict)
    services: list[str] = field(default_factory=list)
    pod_groups: dict[str, dict | None] = field(default_factory=dict)  # scheduler -> its PodGroup; absent: no CRD
    workload: dict | None = None
    # The LocalQueue the job names and its ClusterQueue (quota, usage): None when missing or not readable.
    local_queue: dict | None = None
    cluster_queue: dict | None = None
    logs: dict[str, str] = field(default_factory=dict)  # "pod/container" -> its last lines
    now: str = ""
    runtime: dict | None = None  # a TrainJob's TrainingRuntime or ClusterTrainingRuntime; {} when not readable
    kueue_version: str | None = None  # Kueue's release (v0.19.2) for a queued job; None when unknown

    @property
    def name(self) -> str:
        return self.job["metadata"]["name"]

    @property
    def kind(self) -> str:
        return self.job_kind.kind

    @property
    def job_kind(self) -> JobKind:
        return kinds.for_object(self.job)

    @property
    def container(self) -> str:
        """The training container: the one whose requests, limits and log are the job's."""
        return self.job_kind.container

    def pod_specs(self) -> dict[str, dict]:
        """The pod templates by role, as the job (and its runtime) give them."""
        return self.job_kind.pod_specs(self.job, self.runtime)

    @property
    def namespace(self) -> str:
        return self.job["metadata"].get("namespace", "")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Snapshot:
        return cls(**data)

    def events_of(self, kind: str, name: str) -> list[dict]:
        found = [e for e in self.events if (e.get("involvedObject") or {}).get("kind") == kind
                 and (e.get("involvedObject") or {}).get("name") == name]
        return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def save(shot: Snapshot, path: str) -> None:
    import yaml

    from generator.files import write_atomic

    write_atomic(path, yaml.safe_dump(shot.as_dict(), sort_keys=False))


def load(path: str) -> Snapshot:
    from generator.errors import Finding, UserError
    from generator.job.values_io import load_mapping

    data = load_mapping(path, "a diagnose snapshot")
    try:
        shot = Snapshot.from_dict(data)
        shot.job["metadata"]["name"]
    except (TypeError, KeyError):
        raise UserError([Finding("", "is not a snapshot written by `diagnose --save`",
                                 hint="write one with `python -m generator diagnose NAME --save FILE`")], source=path) from None
    return shot


def stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def collect(c: api.Cluster, name: str) -> Snapshot:
    """Raises UserError when the job itself cannot be read; anything else missing is recorded."""
    kind, job = api.find(c, name)
    job.get("metadata", {}).pop("managedFields", None)

    def serialize(obj) -> dict:
        plain = c.core.api_client.sanitize_for_serialization(obj)
        plain.get("metadata", {}).pop("managedFields", None)  # who wrote which field: noise here
        return plain

    shot = Snapshot(job=job, now=stamp())
    ref = kind.runtime_ref(job)
    if ref:
        shot.runtime = _runtime(c, kind, *ref)
    shot.pods = [serialize(p) for p in api.pods(c, name, kind)]
    events = reads.optional(
        lambda: c.core.list_namespaced_event(c.namespace, _request_timeout=c.request_timeout).items) or []
    mine = {(kind.kind, name), ("PodGroup", name), ("JobSet", name)} | {("Pod", p["metadata"]["name"]) for p in shot.pods}
    # A kind with child Jobs (a TrainJob's JobSet) makes one per replicated job, <name>-<replicated job>.
    shot.workload = scheduling.workload(c, job)
    if shot.workload:  # its own Workload's events, not those of every Workload in the namespace
        mine.add(("Workload", shot.workload["metadata"]["name"]))
    shot.events = [serialize(e) for e in events if (e.involved_object.kind, e.involved_object.name) in mine
                   or e.involved_object.kind == "PersistentVolumeClaim"
                   or (kind.child_jobs and e.involved_object.kind == "Job"
                       and (e.involved_object.name or "").startswith(name + "-"))]
    nodes = reads.optional(lambda: c.core.list_node(_request_timeout=c.request_timeout).items)
    shot.nodes = None if nodes is None else [_node_summary(serialize(n)) for n in nodes]
    services = reads.optional(
        lambda: c.core.list_namespaced_service(c.namespace, _request_timeout=c.request_timeout).items)
    shot.services = sorted(s.metadata.name for s in services or [])
    claims, secrets, config_maps = references(shot)
    for claim in sorted(claims):
        shot.claims[claim] = reads.read(lambda n=claim: serialize(c.core.read_namespaced_persistent_volume_claim(
            n, c.namespace, _request_timeout=c.request_timeout)))
    for secret in sorted(secrets):
        shot.secrets[secret] = reads.read(lambda n=secret: c.core.read_namespaced_secret(
            n, c.namespace, _request_timeout=c.request_timeout)) is not None
    for cm in sorted(config_maps):
        shot.config_maps[cm] = reads.read(lambda n=cm: c.core.read_namespaced_config_map(
            n, c.namespace, _request_timeout=c.request_timeout)) is not None
    shot.pod_groups = scheduling.pod_groups(c, name)
    queue = (job["metadata"].get("labels") or {}).get(KUEUE_LABEL)
    if queue:
        shot.local_queue, shot.cluster_queue = scheduling.queues(c, queue)
        shot.kueue_version = scheduling.kueue_version(c)
    for pod in shot.pods:
        for status in _container_statuses(pod):
            if _failed(status):
                previous = "terminated" not in (status.get("state") or {})
                text = reads.optional(lambda p=pod, s=status, prev=previous: c.core.read_namespaced_pod_log(
                    p["metadata"]["name"], c.namespace, container=s["name"], previous=prev, tail_lines=LAUNCHER_LINES,
                    _request_timeout=c.request_timeout))
                if text:
                    shot.logs[f"{pod['metadata']['name']}/{status['name']}"] = last_lines(text)
    return shot


def _runtime(c: api.Cluster, kind: JobKind, plural: str, name: str, namespaced: bool) -> dict | None:
    """The runtime a job names: None when it does not exist, {} when it may not be read."""
    if namespaced:
        return reads.read(lambda: c.custom.get_namespaced_custom_object(
            kind.group, kind.version, c.namespace, plural, name, _request_timeout=c.request_timeout))
    return reads.read(lambda: c.custom.get_cluster_custom_object(kind.group, kind.version, plural, name,
                                                                 _request_timeout=c.request_timeout))


def last_lines(text: str) -> str:
    """A failed container's last LOG_LINES lines; under torchrun, the worker's own last lines and
    one line for torchrun's report of it, instead of the launcher's traceback."""
    lines = text.rstrip("\n").splitlines()
    failed = next((i for i, line in enumerate(lines) if line.startswith(CHILD_FAILED)), None)
    if failed is not None:
        start = next((i for i in range(failed, -1, -1) if lines[i].startswith("Traceback (most recent call last)")), failed)
        if start and re.match(r"^[EW]\d{4} .*\] failed \(exitcode", lines[start - 1]):
            start -= 1  # the agent's log line that comes with it
        report = "\n".join(lines[failed:])
        rank = re.search(r"rank\s*:\s*(\d+ \(local_rank: \d+\))", report)
        code = re.search(r"exitcode\s*:\s*(-?\d+)", report)
        summary = "torchrun: " + (f"rank {rank.group(1)}" if rank else "a worker") + " failed" + (
            f" with exit code {code.group(1)}" if code else "") + " (its traceback of the launcher left out)"
        lines = lines[:start] + [summary]
    return "\n".join(lines[-LOG_LINES:]) + "\n"


def references(shot: Snapshot) -> tuple[set[str], set[str], set[str]]:
    """The claims, Secrets and ConfigMaps the job's pod templates (and pods) name."""
    specs = list(shot.pod_specs().values()) + [p.get("spec", {}) for p in shot.pods]
    claims, secrets, config_maps = set(), set(), set()
    for spec in specs:
        for volume in spec.get("volumes") or []:
            if volume.get("persistentVolumeClaim"):
                claims.add(volume["persistentVolumeClaim"]["claimName"])
            if volume.get("secret") and not volume["secret"].get("optional"):
                secrets.add(volume["secret"]["secretName"])
            if volume.get("configMap") and not volume["configMap"].get("optional"):
                config_maps.add(volume["configMap"]["name"])
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for ref in env_references(container):
                (secrets if ref[0] == "Secret" else config_maps).add(ref[1])
    return claims, secrets, config_maps


def env_references(container: dict) -> list[tuple[str, str, str]]:
    """(kind, name, where) of each required Secret or ConfigMap a container's env names."""
    out = []
    for item in container.get("env") or []:
        source = item.get("valueFrom") or {}
        for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            ref = source.get(key)
            if ref and not ref.get("optional"):
                out.append((kind, ref["name"], f"env {item['name']}"))
    for item in container.get("envFrom") or []:
        for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            ref = item.get(key)
            if ref and not ref.get("optional"):
                out.append((kind, ref["name"], "envFrom"))
    return out


def _container_statuses(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _failed(status: dict) -> bool:
    state, last = status.get("state") or {}, status.get("lastState") or {}
    terminated = state.get("terminated") or last.get("terminated") or {}
    return bool(terminated.get("exitCode")) or (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"


def _node_summary(node: dict) -> dict:
    """What the rules need of a node: its name, labels, taints (with timeAdded), allocatable
    resources, the conditions that are True (a node's pressure: DiskPressure, MemoryPressure,
    PIDPressure) and Ready whatever it says (False or Unknown: a node lost), each with its
    lastTransitionTime."""
    status = node.get("status") or {}
    conditions = [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                  for c in status.get("conditions") or [] if c.get("status") == "True" or c.get("type") == "Ready"]
    return {"metadata": {"name": node["metadata"]["name"], "labels": node["metadata"].get("labels") or {}},
            "spec": {"taints": (node.get("spec") or {}).get("taints") or []},
            "status": {"allocatable": status.get("allocatable") or {}, "conditions": conditions}}


