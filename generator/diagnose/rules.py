"""From a snapshot to findings: each rule reads one kind of trouble the way an experienced user
reads events and statuses, and names the chart value that fixes it. Rules are listed in the
order their findings rank within a severity: a cause before its symptoms."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from generator.cluster import client as api
from generator.diagnose.snapshot import Snapshot, env_references

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}
INIT_CONTAINER = "init-pytorch"  # the operator's: waits until the Master's Service resolves
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
WORKER_WAIT_SECONDS = 120  # Workers in init this long with the Master running: its name does not resolve


@dataclass(frozen=True)
class Diagnosis:
    severity: str
    object: str  # Kind/name
    reason: str
    message: str
    fix: str

    def as_dict(self) -> dict:
        return asdict(self)


Rule = Callable[[Snapshot], Iterator[Diagnosis]]


def diagnose(shot: Snapshot) -> list[Diagnosis]:
    """Every rule's findings, most severe first, a rule's rank breaking ties; no repeats."""
    found: list[tuple[int, int, Diagnosis]] = []
    for rank, rule in enumerate(RULES):
        for d in rule(shot):
            found.append((SEVERITY_ORDER[d.severity], rank, d))
    seen, out = set(), []
    for _, _, d in sorted(found, key=lambda item: item[:2]):
        if (d.object, d.reason, d.message) not in seen:
            seen.add((d.object, d.reason, d.message))
            out.append(d)
    return out


# --- helpers -------------------------------------------------------------------------------------
def _pods(shot: Snapshot, phase: str | None = None) -> list[dict]:
    return [p for p in shot.pods if phase is None or (p.get("status") or {}).get("phase") == phase]


def _pod_name(pod: dict) -> str:
    return pod["metadata"]["name"]


def _objects(kind: str, names: list[str]) -> str:
    names = sorted(names)
    return f"{kind}/{names[0]}" + (f" (and {len(names) - 1} more: {', '.join(names[1:])})" if len(names) > 1 else "")


def _role(pod: dict) -> str:
    return ((pod["metadata"].get("labels") or {}).get("training.kubeflow.org/replica-type") or "").lower()


def _statuses(pod: dict, init: bool | None = None) -> list[dict]:
    status = pod.get("status") or {}
    inits = status.get("initContainerStatuses") or []
    mains = status.get("containerStatuses") or []
    return inits if init else mains if init is False else [*inits, *mains]


def _job_state(shot: Snapshot) -> tuple[str, dict]:
    return api.condition(shot.job)


def _ended(shot: Snapshot) -> bool:
    return _job_state(shot)[0] in api.TERMINAL


def _v2(shot: Snapshot) -> bool:
    return shot.kind == api.TRAINJOB.kind


def _suspended(shot: Snapshot) -> bool:
    spec = shot.job.get("spec") or {}
    return bool(spec.get("suspend") if _v2(shot) else (spec.get("runPolicy") or {}).get("suspend"))


def _seconds_since(shot: Snapshot, stamp: str | None) -> float:
    import datetime

    if not stamp or not shot.now:
        return 0.0
    parse = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(shot.now) - parse(stamp)).total_seconds()


def _requests(pod: dict, resource: str, main: str) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == main:
            value = ((container.get("resources") or {}).get("requests") or {}).get(resource)
            if value is None:
                value = ((container.get("resources") or {}).get("limits") or {}).get(resource)
            return str(value) if value is not None else "unset"
    return "unset"


def _unschedulable(pod: dict, shot: Snapshot) -> str:
    """The scheduler's message: the PodScheduled condition's, else the last FailedScheduling event's."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("message"):
            return cond["message"]
    failed = [e for e in shot.events_of("Pod", _pod_name(pod)) if e.get("reason") == "FailedScheduling"]
    return failed[-1].get("message", "") if failed else ""


# --- the rules -----------------------------------------------------------------------------------
def scheduling(shot: Snapshot) -> Iterator[Diagnosis]:
    """Pending pods the scheduler could not place: one finding per cause, naming every pod it holds."""
    causes: dict[tuple[str, str, str], list[str]] = {}
    for pod in _pods(shot, "Pending"):
        message = _unschedulable(pod, shot)
        if not message:
            continue
        for reason, text, fix in _scheduling_causes(message, pod, shot):
            causes.setdefault((reason, text, fix), []).append(_pod_name(pod))
    for (reason, text, fix), pods in causes.items():
        yield Diagnosis(ERROR, _objects("Pod", pods), reason, text, fix)


def _scheduling_causes(message: str, pod: dict, shot: Snapshot) -> list[tuple[str, str, str]]:
    out = []
    offered = _offered(shot)
    for resource in dict.fromkeys(re.findall(r"Insufficient ([\w./-]*\w)", message)):
        have = f"; the nodes offer {offered[resource]} in all" if resource in offered else ""
        if resource.endswith("/gpu"):
            fix = (f"lower `resources.gpus` (each pod asks for {_requests(pod, resource, shot.container)}{have}), or add nodes with "
                   f"{resource}; `gpuResourceName` must be the resource your GPU nodes offer")
        elif resource in ("cpu", "memory"):
            fix = (f"lower `resources.requests.{resource}` (each pod asks for {_requests(pod, resource, shot.container)}{have}), "
                   "or use fewer or larger nodes")
        else:
            fix = f"lower the request for {resource} (each pod asks for {_requests(pod, resource, shot.container)}{have})"
        out.append((f"Insufficient {resource}", message, fix))
    taints = re.findall(r"untolerated taint\(?s?\)? ?(\{[^}]*\})", message)
    if taints or "untolerated taint" in message:
        shown = ", ".join(sorted(set(taints))) or "the nodes' taints"
        out.append(("UntoleratedTaint", message,
                    f"add to `tolerations` one entry per taint the pods may accept ({shown}), e.g. "
                    + _toleration_example(shot, taints)))
    if "didn't match Pod's node affinity/selector" in message:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        out.append(("NodeSelectorMismatch", message,
                    f"`nodeSelector` {selector or '(empty)'} or `affinity` matches no node with room; fix the labels to "
                    "ones your nodes carry (`kubectl get nodes --show-labels`)"))
    missing = re.findall(r'persistentvolumeclaim "([^"]+)" not found', message)
    explained = bool(missing)
    for claim in [c for c in missing if shot.claims.get(c, {}) is not None]:  # claims() tells a known-missing one
        out.append(("ClaimNotFound", message,
                    f"claim {claim} does not exist: create it, or leave `output.existingClaim` empty so the chart "
                    "creates one with `output.enabled: true`"))
    if "unbound immediate PersistentVolumeClaims" in message:
        out.append(("ClaimUnbound", message, "a claim the pods mount is not bound; see the claim's finding below, or set "
                                             "`output.storageClassName` to a StorageClass that provisions"))
    if "volume node affinity conflict" in message:
        out.append(("VolumeNodeAffinity", message, "the claim's volume lives where the pods cannot go: use a "
                                                   "ReadWriteMany `output.storageClassName`, or pin the pods with "
                                                   "`nodeSelector` to the volume's zone"))
    if not out and not explained:
        out.append(("FailedScheduling", message, "read the scheduler's message: each 'N node(s) ...' part is a reason "
                                                 "nodes were ruled out"))
    return out


def _offered(shot: Snapshot) -> dict[str, str]:
    """Allocatable totals over the nodes, when the snapshot could read them."""
    from decimal import Decimal

    from generator.job import quantity

    totals: dict[str, Decimal] = {}
    for node in shot.nodes or []:
        for resource, value in (node["status"].get("allocatable") or {}).items():
            try:
                totals[resource] = totals.get(resource, Decimal(0)) + quantity.parse(str(value))
            except ValueError:
                continue
    return {k: f"{v / 2**30:.1f}Gi" if k == "memory" else f"{v.normalize():f}" for k, v in totals.items()}


def _toleration_example(shot: Snapshot, shown: list[str]) -> str:
    for node in shot.nodes or []:
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute"):
                return (f"{{key: {taint['key']}, operator: Equal, value: {taint.get('value', '')}, "
                        f"effect: {taint['effect']}}}")
    return "{key: KEY, operator: Exists, effect: NoSchedule}"


def images(shot: Snapshot) -> Iterator[Diagnosis]:
    for pod in shot.pods:
        for status in _statuses(pod):
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") not in PULL_FAILURES:
                continue
            image = status.get("image", "")
            if status["name"] == INIT_CONTAINER:
                fix = (f"the operator's init container image {image} cannot be pulled here: mirror it and set the "
                       "operator chart's `pytorchInitContainerImage` (an image with `nslookup`, as alpine has)")
            else:
                fix = (f"check `image.repository`, `image.tag` or `image.digest` (now {image}); for a private registry "
                       "set `image.pullSecrets`")
            yield Diagnosis(ERROR, f"Pod/{_pod_name(pod)}", waiting["reason"],
                            f"container {status['name']}: {waiting.get('message') or 'the image cannot be pulled'}", fix)


def references(shot: Snapshot) -> Iterator[Diagnosis]:
    """Secrets and ConfigMaps the pods' env and volumes name that do not exist."""
    specs = shot.pod_specs()
    told = set()
    for role, spec in specs.items():
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for kind, name, where in env_references(container):
                known = shot.secrets if kind == "Secret" else shot.config_maps
                if known.get(name, True) or (kind, name) in told:
                    continue
                told.add((kind, name))
                create = (f"kubectl create secret generic {name} -n {shot.namespace} --from-literal=KEY=VALUE"
                          if kind == "Secret" else f"kubectl create configmap {name} -n {shot.namespace} --from-literal=KEY=VALUE")
                yield Diagnosis(ERROR, f"{kind}/{name}", f"{kind}NotFound",
                                f"{role} container {container['name']} reads {where} from {kind} {name}, which does not "
                                f"exist; its pods wait in CreateContainerConfigError",
                                f"create it (`{create}`), or change `env`/`envFrom`"
                                + ("" if _v2(shot) else f" (or `{role.lower()}.env`)"))
        for volume in spec.get("volumes") or []:
            for key, kind, field in (("secret", "Secret", "secretName"), ("configMap", "ConfigMap", "name")):
                source = volume.get(key)
                if not source or source.get("optional"):
                    continue
                known = shot.secrets if kind == "Secret" else shot.config_maps
                if not known.get(source[field], True) and (kind, source[field]) not in told:
                    told.add((kind, source[field]))
                    yield Diagnosis(ERROR, f"{kind}/{source[field]}", f"{kind}NotFound",
                                    f"volume {volume['name']} of the {role} pods mounts {kind} {source[field]}, which "
                                    "does not exist; the pods wait in ContainerCreating",
                                    f"create {kind} {source[field]} in namespace {shot.namespace}, or drop it from "
                                    "`extraVolumes`")


def claims(shot: Snapshot) -> Iterator[Diagnosis]:
    for name, claim in shot.claims.items():
        if claim is None:
            yield Diagnosis(ERROR, f"PersistentVolumeClaim/{name}", "ClaimNotFound",
                            f"the pods mount claim {name}, which does not exist in namespace {shot.namespace}",
                            "create the claim, or leave `output.existingClaim` empty and set `output.enabled: true` so "
                            "the chart creates one")
            continue
        if not claim:
            continue  # present, but not readable with these credentials
        phase = (claim.get("status") or {}).get("phase")
        if phase == "Pending":
            events = [e for e in shot.events_of("PersistentVolumeClaim", name) if e.get("type") == "Warning"]
            said = events[-1].get("message", "") if events else "no volume is bound to it yet"
            storage_class = (claim.get("spec") or {}).get("storageClassName")
            yield Diagnosis(WARNING, f"PersistentVolumeClaim/{name}", events[-1].get("reason", "Pending") if events else "Pending",
                            f"claim {name} is Pending: {said}",
                            f"set `output.storageClassName` (now {storage_class or 'the default'}) to a StorageClass "
                            "that provisions volumes here (`kubectl get storageclass`)")
        modes = (claim.get("spec") or {}).get("accessModes") or []
        users = [p for p in shot.pods if any((v.get("persistentVolumeClaim") or {}).get("claimName") == name
                                             for v in (p.get("spec") or {}).get("volumes") or [])]
        nodes = {(p.get("spec") or {}).get("nodeName") for p in users} - {None}
        if "ReadWriteOnce" in modes and len(nodes) > 1:
            yield Diagnosis(ERROR, f"PersistentVolumeClaim/{name}", "ReadWriteOnceOnManyNodes",
                            f"claim {name} is ReadWriteOnce but pods on {len(nodes)} nodes mount it "
                            f"({', '.join(sorted(nodes))}); only one node can attach it (Multi-Attach error)",
                            "mount it on the Master only (`output.mountOn: master`), or use "
                            "`output.accessModes: [ReadWriteMany]` with a StorageClass that supports it")
    for pod in shot.pods:
        for event in shot.events_of("Pod", _pod_name(pod)):
            if event.get("reason") == "FailedAttachVolume" and "Multi-Attach" in event.get("message", ""):
                yield Diagnosis(ERROR, f"Pod/{_pod_name(pod)}", "Multi-Attach", event["message"],
                                "mount the claim on the Master only (`output.mountOn: master`), or use "
                                "`output.accessModes: [ReadWriteMany]`")


def kueue(shot: Snapshot) -> Iterator[Diagnosis]:
    labels = shot.job["metadata"].get("labels") or {}
    queue = labels.get("kueue.x-k8s.io/queue-name")
    workload = shot.workload
    if workload is None:
        if queue and _suspended(shot):
            integration = "trainer.kubeflow.org/trainjob" if _v2(shot) else "kubeflow.org/pytorchjob"
            yield Diagnosis(ERROR, f"{shot.kind}/{shot.name}", "NoWorkload",
                            f"the job asks for Kueue queue {queue} and is suspended, but Kueue made no Workload for it",
                            f"check that Kueue runs with the {integration} integration enabled, or clear "
                            "`kueue.queueName` to run without it")
        return
    name = f"Workload/{workload['metadata']['name']}"
    conditions = {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}
    admitted = conditions.get("Admitted", {}).get("status") == "True"
    reserved = conditions.get("QuotaReserved", {})
    if not admitted:
        message = reserved.get("message") or conditions.get("Admitted", {}).get("message") or "waiting for quota"
        if "LocalQueue" in message and ("doesn't exist" in message or "not found" in message):
            fix = f"set `kueue.queueName` (now {queue}) to a LocalQueue of namespace {shot.namespace} (`kubectl get localqueues -n {shot.namespace}`)"
        elif "inactive" in message:
            fix = "the ClusterQueue behind the LocalQueue is inactive: ask its admin, or choose another `kueue.queueName`"
        else:
            fix = (f"the queue {queue} lacks quota for the whole job: lower `resources.requests` or `topology.workers`, "
                   "or wait for quota; `kubectl get clusterqueues` shows usage")
        yield Diagnosis(WARNING, name, reserved.get("reason") or "NotAdmitted", f"not admitted by Kueue: {message}", fix)
    elif _suspended(shot):
        yield Diagnosis(WARNING, name, "AdmittedButSuspended",
                        "admitted by Kueue, but the job is still suspended: Kueue has not resumed it",
                        "check Kueue's controller log for the job; `kueue.queueName` must not be combined with "
                        "`runPolicy.suspend: true`")
    if conditions.get("Evicted", {}).get("status") == "True":
        evicted = conditions["Evicted"]
        yield Diagnosis(WARNING, name, evicted.get("reason", "Evicted"), f"evicted by Kueue: {evicted.get('message', '')}",
                        "Kueue re-queues it; a higher `priorityClassName` keeps it from being preempted")


def gang(shot: Snapshot) -> Iterator[Diagnosis]:
    """PodGroups: a gang scheduler holds every pod until all fit at once."""
    for scheduler, marker in (("volcano", "scheduling.k8s.io/group-name"), ("scheduler-plugins", "scheduling.x-k8s.io/pod-group")):
        wanted = [p for p in shot.pods if marker in (p["metadata"].get("annotations") or {})
                  or marker in (p["metadata"].get("labels") or {})
                  or (p.get("spec") or {}).get("schedulerName") == scheduler]
        if not wanted:
            continue
        if scheduler not in shot.pod_groups:
            instead = ("drop `podGroupPolicy` from the job's TrainingRuntime" if _v2(shot)
                       else "run the operator chart with `gangScheduling.enabled: false`")
            yield Diagnosis(ERROR, f"{shot.kind}/{shot.name}", "PodGroupCRDMissing",
                            f"the pods wait for {scheduler}'s gang scheduling (PodGroup {shot.name}), but this cluster "
                            "serves no podgroups of that kind, so nothing will schedule them",
                            f"install {scheduler}, or {instead}")
            continue
        group = shot.pod_groups[scheduler]
        if group is None:
            maker = "Trainer's controller" if _v2(shot) else "the operator"
            yield Diagnosis(WARNING, f"{shot.kind}/{shot.name}", "PodGroupMissing",
                            f"the pods name PodGroup {shot.name}, which does not exist yet",
                            f"{maker} creates it; check its log and the job's events")
            continue
        phase = (group.get("status") or {}).get("phase", "")
        if phase in ("Pending", "Inqueue", "PreScheduling", "Scheduling", "Unknown", ""):
            said = [c.get("message", "") for c in (group.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Unschedulable" and c.get("status") == "True"]
            minimum = (group.get("spec") or {}).get("minMember")
            yield Diagnosis(WARNING, f"PodGroup/{shot.name}", f"PodGroup{phase or 'Pending'}",
                            f"the gang of {minimum} pods is {phase or 'Pending'}" + (f": {said[-1]}" if said else ""),
                            "all its pods must fit at once: lower `resources.requests` or `topology.workers`, or "
                            "`runPolicy.schedulingPolicy.minAvailable` for fewer at a time; a `queue` must have room")


def replicas(shot: Snapshot) -> Iterator[Diagnosis]:
    """Containers that failed or crash-loop: exit code, reason and the log's last lines."""
    for pod in shot.pods:
        for status in _statuses(pod):
            state, last = status.get("state") or {}, status.get("lastState") or {}
            terminated = state.get("terminated") or last.get("terminated") or {}
            waiting = state.get("waiting") or {}
            looping = waiting.get("reason") == "CrashLoopBackOff"
            code = terminated.get("exitCode")
            if not code and not looping:
                continue
            reason = terminated.get("reason") or waiting.get("reason") or "Error"
            restarts = status.get("restartCount", 0)
            text = f"container {status['name']} exited with code {code} ({reason})"
            if restarts:
                text += f", restarted {restarts} time{'s' if restarts != 1 else ''}"
            if looping:
                text += "; now in CrashLoopBackOff"
            log = shot.logs.get(f"{_pod_name(pod)}/{status['name']}")
            if log:
                text += "; its last log lines:\n" + "\n".join(f"    {line}" for line in log.rstrip().splitlines())
            if reason == "OOMKilled":
                fix = (f"raise `resources.limits.memory` (now {_limit(pod, 'memory', shot.container)}), or lower the batch size or "
                       "`topology.nprocPerNode`")
            elif code == 137:
                fix = "it was killed (SIGKILL): by the node, a liveness probe or the OOM killer; check the node's events"
            elif code in (126, 127):
                fix = "the command is not in the image: check `command`, `launcher` and `image.*`"
            else:
                fix = "read the log lines above; fix `command`/`args` or the code, then resubmit with `--replace`"
            yield Diagnosis(ERROR, f"Pod/{_pod_name(pod)}", reason if not looping else "CrashLoopBackOff", text, fix)


def _limit(pod: dict, resource: str, main: str) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == main:
            return str(((container.get("resources") or {}).get("limits") or {}).get(resource, "unset"))
    return "unset"


def backoff(shot: Snapshot) -> Iterator[Diagnosis]:
    if _v2(shot):
        yield from _set_restarts(shot)
        return
    policy = shot.job.get("spec", {}).get("runPolicy") or {}
    limit = policy.get("backoffLimit")
    restarts = sum(s.get("restartCount", 0) for p in shot.pods for s in _statuses(p, init=False))
    state, cond = _job_state(shot)
    if state == "Failed" and _out_of_restarts(shot, cond):
        yield Diagnosis(ERROR, f"PyTorchJob/{shot.name}", cond.get("reason") or "BackoffLimitExceeded",
                        cond.get("message", "") or f"{restarts} restarts reached backoffLimit {limit}",
                        f"the restarts were failures: fix their cause (findings above); `runPolicy.backoffLimit` (now "
                        f"{limit}) only allows more of them")
    elif limit is not None and restarts and state not in api.TERMINAL and restarts >= max(1, int(limit) - 1):
        yield Diagnosis(WARNING, f"PyTorchJob/{shot.name}", "NearBackoffLimit",
                        f"{restarts} container restarts so far count against backoffLimit {limit}",
                        f"fix the failing replica before the job fails; `runPolicy.backoffLimit` (now {limit}) sets how many")


def _out_of_restarts(shot: Snapshot, cond: dict) -> bool:
    """Whether a failure condition says the restarts ran out (backoff() explains those)."""
    said = (cond.get("reason", "") + " " + cond.get("message", "")).lower()
    return "backoff" in said or (_v2(shot) and "restarts" in said)


def _set_restarts(shot: Snapshot) -> Iterator[Diagnosis]:
    """A TrainJob fails when its node Job exhausts its backoffLimit and JobSet's failurePolicy
    allows no further restart of the whole set (the chart's runPolicy.backoffLimit sets both)."""
    state, cond = _job_state(shot)
    if state == "Failed" and _out_of_restarts(shot, cond):
        yield Diagnosis(ERROR, f"{shot.kind}/{shot.name}", cond.get("reason") or "ReachedMaxRestarts",
                        cond.get("message") or "the set of nodes was restarted as often as its failure policy allows",
                        "the restarts were failures: fix their cause (findings above); `runPolicy.backoffLimit` sets how "
                        "many restarts of the whole set the job gets (JobSet's failurePolicy.maxRestarts)")


def master(shot: Snapshot) -> Iterator[Diagnosis]:
    """Workers held in the operator's init container, which waits for the Master's Service."""
    if _ended(shot) or _v2(shot):
        return  # leftovers() tells of pods that outlive the job; TrainJob pods wait for no init container
    waiting = [p for p in shot.pods if _role(p) == "worker" and any(
        s["name"] == INIT_CONTAINER and "running" in (s.get("state") or {}) for s in _statuses(p, init=True))]
    if not waiting:
        return
    masters = [p for p in shot.pods if _role(p) == "master"]
    names = [_pod_name(p) for p in waiting]
    if not masters:
        yield Diagnosis(ERROR, _objects("Pod", names), "NoMaster",
                        "Workers wait in init-pytorch for the Master, and no Master pod exists",
                        "check the job's events: the operator could not create the Master pod")
        return
    m = masters[0]
    phase = (m.get("status") or {}).get("phase", "Pending")
    if phase != "Running":
        yield Diagnosis(WARNING, _objects("Pod", names), "WaitingForMaster",
                        f"Workers wait in init-pytorch for the Master, which is {phase}",
                        f"the Master is the cause: see the findings for Pod/{_pod_name(m)}")
        return
    started = min(((s.get("state") or {}).get("running") or {}).get("startedAt") or shot.now
                  for p in waiting for s in _statuses(p, init=True) if s["name"] == INIT_CONTAINER)
    if _seconds_since(shot, started) > WORKER_WAIT_SECONDS:
        service = _pod_name(m)
        known = service in shot.services
        yield Diagnosis(WARNING, _objects("Pod", names), "MasterNotResolvable",
                        f"Workers have waited over {WORKER_WAIT_SECONDS}s in init-pytorch although the Master runs: its "
                        f"Service {service} {'does not resolve in cluster DNS' if known else 'does not exist'}",
                        "check cluster DNS (CoreDNS) and that the operator created the Service; the init container's "
                        "image is the operator chart's `pytorchInitContainerImage`")


def istio(shot: Snapshot) -> Iterator[Diagnosis]:
    for pod in shot.pods:
        statuses = {s["name"]: s for s in _statuses(pod, init=False)}
        if "istio-proxy" not in statuses and not any(c.get("name") == "istio-proxy" for c in
                                                     (pod.get("spec") or {}).get("containers") or []):
            continue
        trainer_done = "terminated" in ((statuses.get(shot.container) or {}).get("state") or {})
        proxy_running = "running" in ((statuses.get("istio-proxy") or {}).get("state") or {})
        if trainer_done and proxy_running:
            yield Diagnosis(ERROR, f"Pod/{_pod_name(pod)}", "SidecarKeepsPodRunning",
                            f"the {shot.container} container has ended but the istio-proxy sidecar still runs, so the pod never "
                            "finishes and the job never ends",
                            "set `disableIstioSidecar: true` (the pods get sidecar.istio.io/inject: \"false\") and resubmit")
        else:
            yield Diagnosis(WARNING, f"Pod/{_pod_name(pod)}", "IstioSidecar",
                            "an istio-proxy sidecar was injected; it keeps the pod running after training ends and can "
                            "block the rendezvous port until it is ready",
                            "set `disableIstioSidecar: true`")


def leftovers(shot: Snapshot) -> Iterator[Diagnosis]:
    """cleanPodPolicy is the training operator's; a TrainJob's pods go with their batch Jobs."""
    state, _ = _job_state(shot)
    if state not in api.TERMINAL or _v2(shot):
        return
    running = [_pod_name(p) for p in shot.pods if (p.get("status") or {}).get("phase") in ("Running", "Pending")
               and not p["metadata"].get("deletionTimestamp")]
    if running:
        policy = (shot.job.get("spec", {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None"
        yield Diagnosis(WARNING, _objects("Pod", running), "PodsOutliveJob",
                        f"the job {state.lower()} but {len(running)} of its pods still run and hold their resources "
                        f"(cleanPodPolicy {policy})",
                        "set `runPolicy.cleanPodPolicy: Running` so the operator deletes them when the job ends, or "
                        f"`kubectl delete pod -n {shot.namespace} {' '.join(sorted(running))}`")


def job(shot: Snapshot) -> Iterator[Diagnosis]:
    """What the job itself says: the controller's refusals, a suspended job, a job that made no pods."""
    state, cond = _job_state(shot)
    this = f"{shot.kind}/{shot.name}"
    warnings = [(this, e) for e in shot.events_of(shot.kind, shot.name)]
    if _v2(shot):  # JobSet's batch Jobs say why they made no pods (quota, admission)
        jobs = sorted({(e.get("involvedObject") or {}).get("name", "") for e in shot.events
                       if (e.get("involvedObject") or {}).get("kind") == "Job"})
        warnings += [(f"Job/{name}", e) for name in jobs for e in shot.events_of("Job", name)]
    for obj, event in warnings:
        # The operator echoes each unschedulable pod's condition as the job's event: scheduling() has it;
        # a Job's BackoffLimitExceeded is the failure the TrainJob's own condition reports.
        if event.get("type") == "Warning" and event.get("reason") not in ("Unschedulable", "BackoffLimitExceeded"):
            text = event.get("message", "")
            fix = ("lower the pods' requests or raise the namespace's ResourceQuota (`kubectl describe quota -n "
                   f"{shot.namespace}`)" if "exceeded quota" in text else "read the controller's message: it names the field")
            yield Diagnosis(ERROR, obj, event.get("reason", "Warning"), text, fix)
    said = (cond.get("reason", "") + " " + cond.get("message", "")).lower()
    if state == "Failed" and not _out_of_restarts(shot, cond):
        fix = ("raise `runPolicy.activeDeadlineSeconds` (now {}) or train less".format(
            (shot.job.get("spec", {}).get("runPolicy") or {}).get("activeDeadlineSeconds"))
               if "deadline" in said else "the failed replica's finding has its exit code and log lines")
        yield Diagnosis(ERROR, this, cond.get("reason") or "Failed", cond.get("message") or "the job failed", fix)
    queued = (shot.job["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
    if _suspended(shot) and not queued:
        field = "spec.suspend" if _v2(shot) else "spec.runPolicy.suspend"
        patch = '{"spec":{"suspend":false}}' if _v2(shot) else '{"spec":{"runPolicy":{"suspend":false}}}'
        yield Diagnosis(WARNING, this, "Suspended", f"the job is suspended ({field}), so it has no pods",
                        f"set `runPolicy.suspend: false` (or `kubectl patch {shot.kind.lower()} {shot.name} -n "
                        f"{shot.namespace} --type merge -p '{patch}'`)")
    elif not shot.pods and state not in api.TERMINAL and not _suspended(shot) \
            and _seconds_since(shot, shot.job["metadata"].get("creationTimestamp")) > 60:
        if _v2(shot):
            if shot.runtime is None:
                ref = (shot.job.get("spec") or {}).get("runtimeRef") or {}
                yield Diagnosis(ERROR, this, "RuntimeNotFound",
                                f"the job runs on {ref.get('kind', 'ClusterTrainingRuntime')} {ref.get('name')}, which "
                                "does not exist, so Trainer makes no pods for it",
                                "submit the job together with its TrainingRuntime (`generator submit` does), or install "
                                "Trainer's runtimes (`kubectl get clustertrainingruntimes`)")
                return
            yield Diagnosis(ERROR, this, "NoPods",
                            "the job exists for over a minute and has no pods: no Trainer controller (or no JobSet "
                            "controller) is reconciling it",
                            "install Kubeflow Trainer v2.3 with JobSet, and check their logs (`kubectl get jobset "
                            f"{shot.name} -n {shot.namespace}`); or submit with `--target v1` to the training operator")
            return
        yield Diagnosis(ERROR, this, "NoPods",
                        "the job exists for over a minute and has no pods: no operator is reconciling it",
                        "install or fix the operator (charts/pytorch-operator); its log says why, and "
                        "`watchNamespace` must include this namespace")


RULES: list[Rule] = [scheduling, images, references, claims, kueue, gang, replicas, backoff, master, istio, leftovers, job]
