"""Each change in meaning a PyTorchJob's conversion to a TrainJob makes, the operator's contract
(generator/kinds/pytorchjob) on the v1 side and the resolved TrainJob's on the v2 side."""
from __future__ import annotations

import shlex

from generator import kinds
from generator.convert import launch, roles
from generator.convert.report import Change, Conversion
from generator.job.imports import KUEUE_LABEL
from generator.kinds.pytorchjob import admission, importer
from generator.kinds.pytorchjob.contract import CONTRACT_ENV, retryable
from generator.kinds.trainjob import runtime

MAIN = f"{roles.ROLES}.*.template.spec.containers[{admission.CONTAINER}]"
EXIT_CODES = range(1, 256)


def retried(policy: str) -> list[int]:
    """The exit codes after which the operator restarts a pod (the local runner's rule, the one source)."""
    return [code for code in EXIT_CODES if retryable(policy, code)]


def v1_retries(policy: str, backoff_limit: int | None) -> bool:
    return bool(retried(policy)) and backoff_limit != 0


def ranges(codes: list[int]) -> str:
    spans: list[list[int]] = []
    for code in codes:
        if spans and code == spans[-1][1] + 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)



def launch_changes(out: Conversion, command: list[str], main: dict, how: str, v1_env: dict, notes: list[str]) -> list[Change]:
    args = list(main.get("args") or [])
    if how == launch.TORCHRUN_AS_MODULE:
        notes.append(f"`python -m {launch.TORCHRUN_MODULE}` is torchrun: every node starts `{shlex.join(out.command)}`")
    if how != launch.HANDED_TO_TORCHRUN:
        return []
    gone = [k for k in CONTRACT_ENV if k in v1_env and not k.startswith("PET_")]  # torchrun's to set now
    return [Change(f"{MAIN}.command",
                   f"`{shlex.join(command + args)}` ran once per pod, with {', '.join(gone)} set by the operator "
                   "(RANK the pod's rank)",
                   f"every node runs `{shlex.join(out.command)}`: Trainer sets only {', '.join(runtime.RESERVED_ENV)}, "
                   "and torchrun gives each process RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
                   "nothing, if the program reads its ranks from the env (init_process_group's env:// does); a program "
                   "that starts its own processes per pod must leave that to torchrun")]


def nproc_v1(nproc: str) -> str:
    if nproc.isdigit():
        return f"{nproc} process(es) per pod"
    return {"gpu": "one process per GPU of the pod",
            "cpu": "one process per CPU of the machine the pod landed on"}.get(
        nproc, "torchrun's auto: one process per GPU, or without GPUs one per CPU of the machine the pod landed on")


def nproc_changes(spec: dict, nproc: str, how: str, resolved: runtime.Resolved) -> list[Change]:
    if how == launch.HANDED_TO_TORCHRUN or nproc.isdigit():
        return []  # one process per pod before and after, or the same count
    if resolved.nproc == "auto" and nproc in ("auto", "gpu"):
        return []  # torchrun counts the node's GPUs both ways
    written = spec.get("nprocPerNode")
    return [Change("spec.nprocPerNode", f"{written or 'unset, so ' + admission.DEFAULT_NPROC_PER_NODE}: {nproc_v1(nproc)}",
                   f"numProcPerNode unset: Trainer starts {resolved.nproc} process(es) per node (the CPUs of "
                   "resourcesPerNode, at least 1, when the node has no GPUs)",
                   "write the number of processes per pod as spec.nprocPerNode in the v1 job and convert again")]


def restarts(policy: str, run_policy: dict, retries: bool, resolved: runtime.Resolved, notes: list[str]) -> list[Change]:
    limit = run_policy.get("backoffLimit")
    v2_retries = resolved.node_backoff_limit > 0 or resolved.max_set_restarts > 0
    if not retries and not v2_retries:
        if limit:
            notes.append(f"runPolicy.backoffLimit {limit} never applied under restartPolicy {policy}; "
                         "the TrainJob fails at its first failure, as the PyTorchJob did")
        return []
    codes = retried(policy)
    if not codes:
        v1 = f"restartPolicy {policy}: a failed pod failed the job"
    elif codes == list(EXIT_CODES):
        v1 = f"restartPolicy {policy}: a failed pod restarted alone, in place"
    else:
        v1 = (f"restartPolicy {policy}: a pod that exited {ranges(codes)} restarted alone; any other exit code failed "
              "the job at once")
    if retryable(policy, 0):
        v1 += ", and so did one that succeeded"
    v1 += "; " + ("no limit on restarts" if limit is None else f"at most {limit} restart(s) in all (runPolicy.backoffLimit)")
    backoff, sets = resolved.node_backoff_limit, resolved.max_set_restarts
    v2 = (f"restartPolicy {resolved.pod['spec']['restartPolicy']}, whatever the exit code: "
          + (f"a failed node is started again up to {backoff} time(s) (the node Job's backoffLimit)" if backoff else
             "a failed node fails its Job at once (the node Job's backoffLimit 0)")
          + (f", then every node restarts together, up to {sets} time(s) (JobSet failurePolicy.maxRestarts)" if sets
             else ", then the TrainJob fails"))
    fix = ("keep checkpoints so that a restart resumes; exit codes no longer decide what is retried, so a program "
           "that must not be retried should not fail with a retried code" if policy == "ExitCode" else
           "keep checkpoints so that a restart resumes")
    return [Change(f"{roles.ROLES}.*.restartPolicy", v1, v2,
                   fix + "; set spec.runPolicy.backoffLimit in the v1 job to choose how many restarts of every node "
                   "the TrainJob gets")]


def success(spec: dict, specs: dict, resolved: runtime.Resolved) -> list[Change]:
    """As the local runner decides v1's success (the Master; without one, every Worker, or the first
    Worker of an elastic job), against JobSet's (every node)."""
    if resolved.nodes < 2:
        return []
    if "Master" in specs:
        role, v1 = "Master", "the job succeeded when the Master succeeded; the Workers still running were stopped"
    elif spec.get("elasticPolicy") is not None:
        role, v1 = "Worker", "the job succeeded when its first Worker succeeded (elastic); the others still running were stopped"
    else:
        return []  # Workers alone: v1 too waited for every one
    return [Change(f"{roles.ROLES}.{role}", v1, f"the TrainJob completes when every one of its {resolved.nodes} nodes succeeds",
                   "let every rank exit 0 when training ends (the Workers too): destroy the process group and return")]


def elastic(spec: dict, resolved: runtime.Resolved) -> list[Change]:
    elastic = spec.get("elasticPolicy")
    if elastic is None:
        return []
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    bits = [f"between {low} and {high} Workers" if low is not None or high is not None else "elastic Workers",
            f"rendezvous {elastic.get('rdzvBackend') or 'c10d'}"]
    if elastic.get("maxRestarts") is not None:
        bits.append(f"torchrun restarting the group up to {elastic['maxRestarts']} time(s)")
    if elastic.get("metrics"):
        bits.append("a HorizontalPodAutoscaler scaling the Workers")
    return [Change("spec.elasticPolicy", "elastic training: " + ", ".join(bits),
                   f"a fixed {resolved.nodes} node(s), meeting at node 0 (Trainer v2.2 removed elastic training)",
                   "size the job in numNodes (the Worker replicas now); without torchrun's own restarts, failures are "
                   "the job's restarts, so keep checkpoints")]


def scheduling(meta: dict, run_policy: dict, notes: list[str]) -> list[Change]:
    out = []
    queue = (meta.get("labels") or {}).get(KUEUE_LABEL)
    if queue:
        out.append(Change(f"metadata.labels[{KUEUE_LABEL}]",
                          f"Kueue queued the job in {queue} through its {kinds.PYTORCHJOB.kueue_integration} integration",
                          f"the TrainJob keeps the label, and Kueue queues it only with its "
                          f"{kinds.TRAINJOB.kueue_integration} integration enabled; without it the job starts at once",
                          f"check that Kueue's integrations.frameworks lists {kinds.TRAINJOB.kueue_integration}"))
    scheduling = importer.without_stated_defaults(run_policy).get("schedulingPolicy")
    if scheduling:
        out.append(Change("spec.runPolicy.schedulingPolicy",
                          f"gang scheduling: {kinds.PYTORCHJOB.pod_group_maker} made a PodGroup "
                          f"({', '.join(f'{k} {v}' for k, v in scheduling.items())}), when it runs with a gang scheduler",
                          "no PodGroup: the TrainingRuntime has no podGroupPolicy, so nodes are scheduled one by one",
                          "add podGroupPolicy (coscheduling or volcano) to the TrainingRuntime, or queue the job with "
                          f"Kueue ({KUEUE_LABEL})"))
    return out


def cleanup(run_policy: dict) -> list[Change]:
    out = []
    clean = importer.without_stated_defaults(run_policy).get("cleanPodPolicy")
    if clean:
        out.append(Change("spec.runPolicy.cleanPodPolicy", f"{clean}: the operator deleted the job's "
                          f"{'running pods' if clean == 'Running' else 'pods, every one,'} when it finished",
                          "no counterpart: the pods stay with their Jobs until the JobSet goes (deleting the TrainJob, "
                          "or ttlSecondsAfterFinished)",
                          "delete finished TrainJobs, or set spec.runPolicy.ttlSecondsAfterFinished in the v1 job"))
    ttl = run_policy.get("ttlSecondsAfterFinished")
    if ttl is not None:
        out.append(Change("spec.runPolicy.ttlSecondsAfterFinished",
                          f"the operator deleted the PyTorchJob, with its pods, {ttl} s after it finished",
                          f"the TrainingRuntime's JobSet has ttlSecondsAfterFinished {ttl}: its Jobs and pods go {ttl} s "
                          "after it finished, and the TrainJob itself stays",
                          "delete finished TrainJobs yourself (or with a cleanup job) if they must go too"))
    return out


def ports(values: dict) -> list[Change]:
    extra = values.get("extraPorts") or []
    if not extra:
        return []
    named = ", ".join(str(p.get("name") or p.get("containerPort")) for p in extra)
    return [Change(f"{MAIN}.ports", f"the training container declared ports {named}",
                   f"the node container declares only Trainer's port {runtime.MASTER_PORT}",
                   "point probes and Services at port numbers rather than these names, or serve them from a sidecar")]


def pod_names(name: str, main: dict) -> list[Change]:
    """Args or env that name v1's pods, which v2 does not make."""
    texts = [*(main.get("args") or []), *(main.get("command") or []),
             *(str(e.get("value", "")) for e in main.get("env") or [])]
    v1_pods = (f"{name}-master-", f"{name}-worker-")
    if not any(p in str(t) for t in texts for p in v1_pods):
        return []
    return [Change(f"{MAIN}.args/env", f"they name the operator's pods ({name}-master-0, {name}-worker-<i>)",
                   f"those pods do not exist: v2's are {name}-node-0-<i>, node 0 reached as {name}-node-0-0.{name}",
                   "use $(PET_MASTER_ADDR), which Trainer sets, instead of a pod name")]
