"""What keeps a pod's containers from starting or running: Secrets and ConfigMaps that do not
exist, containers that fail or crash-loop, Workers waiting for their Master, a sidecar that
outlives training."""
from __future__ import annotations

from collections.abc import Iterator

from generator.diagnose.rules.common import ERROR, WARNING, Diagnosis, ended, objects, pod_name, seconds_since, statuses
from generator.diagnose.snapshot import Snapshot, env_references
from generator.fixtext import operator_value, setting, value

WORKER_WAIT_SECONDS = 120  # Workers in init this long with the Master running: its name does not resolve
EXTRA_VOLUMES = value("extraVolumes")
MEMORY_LIMIT = value("resources.limits.memory")
NPROC = value("topology.nprocPerNode")
COMMAND, ARGS, LAUNCHER = value("command"), value("args"), value("launcher")
IMAGE = value("image.*")
INIT_IMAGE = operator_value("pytorchInitContainerImage")
NO_SIDECAR = setting("disableIstioSidecar", "true")


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
                                f"create it (`{create}`), or change {shot.job_kind.env_fields(role)}")
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
                                    f"{EXTRA_VOLUMES}")


def replicas(shot: Snapshot) -> Iterator[Diagnosis]:
    """Containers that failed or crash-loop: exit code, reason and the log's last lines."""
    for pod in shot.pods:
        for status in statuses(pod):
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
            log = shot.logs.get(f"{pod_name(pod)}/{status['name']}")
            if log:
                text += "; its last log lines:\n" + "\n".join(f"    {line}" for line in log.rstrip().splitlines())
            if reason == "OOMKilled":
                fix = (f"raise {MEMORY_LIMIT} (now {_limit(pod, 'memory', shot.container)}), or lower the batch size or "
                       f"{NPROC}")
            elif code == 137:
                fix = "it was killed (SIGKILL): by the node, a liveness probe or the OOM killer; check the node's events"
            elif code in (126, 127):
                fix = f"the command is not in the image: check {COMMAND}, {LAUNCHER} and {IMAGE}"
            else:
                fix = f"read the log lines above; fix {COMMAND}/{ARGS} or the code, then resubmit with `--replace`"
            yield Diagnosis(ERROR, f"Pod/{pod_name(pod)}", reason if not looping else "CrashLoopBackOff", text, fix)


def _limit(pod: dict, resource: str, main: str) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == main:
            return str(((container.get("resources") or {}).get("limits") or {}).get(resource, "unset"))
    return "unset"


def master(shot: Snapshot) -> Iterator[Diagnosis]:
    """Workers held in the operator's init container, which waits for the Master's Service."""
    kind = shot.job_kind
    init = kind.init_container
    if ended(shot) or init is None:
        return  # leftovers() tells of pods that outlive the job; a kind without it waits for nothing

    def role(pod: dict) -> str:
        return kind.role(pod["metadata"].get("labels") or {})

    waiting = [p for p in shot.pods if role(p) == "worker" and any(
        s["name"] == init and "running" in (s.get("state") or {}) for s in statuses(p, init=True))]
    if not waiting:
        return
    masters = [p for p in shot.pods if role(p) == "master"]
    names = [pod_name(p) for p in waiting]
    if not masters:
        yield Diagnosis(ERROR, objects("Pod", names), "NoMaster",
                        f"Workers wait in {init} for the Master, and no Master pod exists",
                        "check the job's events: the operator could not create the Master pod")
        return
    m = masters[0]
    phase = (m.get("status") or {}).get("phase", "Pending")
    if phase != "Running":
        yield Diagnosis(WARNING, objects("Pod", names), "WaitingForMaster",
                        f"Workers wait in {init} for the Master, which is {phase}",
                        f"the Master is the cause: see the findings for Pod/{pod_name(m)}")
        return
    started = min(((s.get("state") or {}).get("running") or {}).get("startedAt") or shot.now
                  for p in waiting for s in statuses(p, init=True) if s["name"] == init)
    if seconds_since(shot, started) > WORKER_WAIT_SECONDS:
        service = pod_name(m)
        known = service in shot.services
        yield Diagnosis(WARNING, objects("Pod", names), "MasterNotResolvable",
                        f"Workers have waited over {WORKER_WAIT_SECONDS}s in {init} although the Master runs: its "
                        f"Service {service} {'does not resolve in cluster DNS' if known else 'does not exist'}",
                        "check cluster DNS (CoreDNS) and that the operator created the Service; the init container's "
                        f"image is the operator chart's {INIT_IMAGE}")


def istio(shot: Snapshot) -> Iterator[Diagnosis]:
    for pod in shot.pods:
        mains = {s["name"]: s for s in statuses(pod, init=False)}
        if "istio-proxy" not in mains and not any(c.get("name") == "istio-proxy" for c in
                                                  (pod.get("spec") or {}).get("containers") or []):
            continue
        trainer_done = "terminated" in ((mains.get(shot.container) or {}).get("state") or {})
        proxy_running = "running" in ((mains.get("istio-proxy") or {}).get("state") or {})
        if trainer_done and proxy_running:
            yield Diagnosis(ERROR, f"Pod/{pod_name(pod)}", "SidecarKeepsPodRunning",
                            f"the {shot.container} container has ended but the istio-proxy sidecar still runs, so the pod never "
                            "finishes and the job never ends",
                            f"set {NO_SIDECAR} (the pods get sidecar.istio.io/inject: \"false\") and resubmit")
        else:
            yield Diagnosis(WARNING, f"Pod/{pod_name(pod)}", "IstioSidecar",
                            "an istio-proxy sidecar was injected; it keeps the pod running after training ends and can "
                            "block the rendezvous port until it is ready",
                            f"set {NO_SIDECAR}")
