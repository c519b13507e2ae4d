"""One PyTorchJob (or v1 values) to a TrainJob and, where the job needs one, its TrainingRuntime,
with each change in meaning: the job's facts on the v1 side, the resolved TrainJob's on the v2 side."""
from __future__ import annotations

import copy
import shlex

from generator import kinds
from generator.container import programs
from generator.convert import launch, roles
from generator.convert.report import Change, Conversion
from generator.errors import Finding, UserError
from generator.job import admission, importer, runtime, validation, values_io
from generator.local import plan as local_plan
from generator.local import runner

RELEASE = "convert"
MAIN = f"{roles.ROLES}.*.template.spec.containers[{admission.CONTAINER}]"
EXIT_CODES = range(1, 256)
OUTPUT_VOLUME = "output"  # the name the chart gives the output claim's volume


def convert_file(path: str, release: str, namespace: str | None, reader=None) -> list[Conversion]:
    """Every job a file holds: PyTorchJob manifests (any number), or one set of v1 values. `reader`
    (images/distribution.py's) reads the configs of images whose ENTRYPOINT a job leaves to run."""
    try:
        documents = values_io.load_documents(path)
    except UserError as exc:
        return [Conversion(path, "", problems=exc.findings)]
    kind = kinds.in_manifest(documents)
    if kind is None:
        return [_from_values(path, documents, release, namespace, reader)]
    if kind.target == "v2":
        return [Conversion(path, "", problems=[Finding("kind", f"is already a {kind.kind}, Trainer v2's own kind", kind.kind,
                                                       "nothing to convert: `generator run` and `submit` take it as it is")])]
    out = [convert_job(d, path, reader) for d in documents if kind.owns(d)]
    carried, problems, review = _others(documents, kind)
    if problems:
        out[0].refuse(out[0].problems + problems)
    else:
        out[0].changes += review
        _carry(out[0], carried, drop_namespace=False)  # the user's objects keep the namespace they name
    return out


def _carry(conversion: Conversion, others: list[dict], drop_namespace: bool) -> None:
    """What the file holds beside its jobs (a claim, a ConfigMap) is the same for v2: written before
    them, as it is."""
    if others and conversion.objects:
        conversion.objects[:0] = _cleaned(others, drop_namespace)
        conversion.notes.append("kept as they are: " + ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in others))


# Kinds that are not namespaced: one in a job's file would act on the whole cluster. Kubernetes'
# own, and Trainer's runtime for every namespace.
CLUSTER_SCOPED = {"Namespace", "Node", "PersistentVolume", "StorageClass", "CSIDriver", "CSINode", "VolumeAttachment",
                  "CustomResourceDefinition", "APIService", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                  "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "PriorityClass", "RuntimeClass",
                  "IngressClass", "CertificateSigningRequest", "FlowSchema", "PriorityLevelConfiguration",
                  "ClusterTrainingRuntime"}
RBAC_GROUP = "rbac.authorization.k8s.io"


def _others(documents: list, kind: kinds.JobKind) -> tuple[list[dict], list[Finding], list[Change]]:
    """The documents beside the jobs, checked as the API server would take them, each by its place
    in the file (documents[i], counting the non-empty ones): (what is carried, why the file is
    refused, what needs a review). RBAC and cluster-scoped objects are refused: what a job's file
    grants or changes beyond its namespace is for its owner to apply on its own."""
    carried, problems, review = [], [], []
    for i, doc in enumerate(documents):
        if kind.owns(doc):
            continue
        where = f"documents[{i}]"
        found = _object_problems(doc, where)
        if found:
            problems += found
            continue
        what = f"{doc['kind']} {doc['metadata']['name']}"
        group = doc["apiVersion"].rpartition("/")[0]
        if group == RBAC_GROUP or doc["kind"] in CLUSTER_SCOPED:
            why = ("grants permissions" if group == RBAC_GROUP else "is not namespaced: it acts on the whole cluster")
            problems.append(Finding(where, f"is a {what}, which {why}; convert carries only the job's namespaced "
                                    "objects", hint="apply it on its own after review, or remove it from the file"))
            continue
        known, found = _schema_problems(doc, where)
        if found:
            problems += found
            continue
        if not known:
            review.append(Change(where, f"{what} ({doc['apiVersion']}) was carried beside the PyTorchJob",
                                 "written as it is beside the TrainJob: a kind this tool does not know, so neither its "
                                 "fields nor what it acts on (its namespace, or the whole cluster) were checked",
                                 "review it before applying the TrainJob's file, or remove it and apply it on its own"))
        carried.append(doc)
    return carried, problems, review


def _object_problems(doc: object, where: str) -> list[Finding]:
    if not isinstance(doc, dict):
        return [Finding(where, f"is a YAML {type(doc).__name__}, not a Kubernetes object, and cannot be carried "
                        "beside the TrainJob", doc, "remove it, or write it as an object with apiVersion, kind and "
                        "metadata.name")]
    out = [Finding(f"{where}.{key}", "is required", doc.get(key), f"give the object its {key}")
           for key in ("apiVersion", "kind") if not isinstance(doc.get(key), str) or not doc.get(key)]
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        out.append(Finding(f"{where}.metadata.name", "is required", None if not isinstance(meta, dict) else
                           meta.get("name"), "give the object a metadata.name"))
    return out


def _schema_problems(doc: dict, where: str) -> tuple[bool, list[Finding]]:
    """(whether Kubernetes' own schema knows the kind, what it refuses): strict, as import checks pod templates."""
    import kubernetes_validate

    from generator.job import podschema

    try:
        kubernetes_validate.validate(doc, podschema.KUBE_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return False, []
    except kubernetes_validate.ValidationError as exc:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        return True, [Finding(f"{where}{path}", exc.message.splitlines()[0], hint="fix the object as Kubernetes expects it")]
    return True, []


def _from_values(path: str, documents: list, release: str, namespace: str | None, reader=None) -> Conversion:
    """v1 values: the PyTorchJob they render, converted, with findings named by the values' keys."""
    try:
        values = values_io.mapping_of(documents, path)
    except UserError as exc:
        return Conversion(path, "", problems=exc.findings)
    if values.get("target") == "v2":
        return Conversion(path, "", problems=[Finding("target", "is already v2", "v2",
                                                      "nothing to convert: `generator render` gives its TrainJob")])
    checked = validation.check_values({**values, "target": "v1"}, release, namespace or "default")
    if checked.findings:
        return Conversion(path, "", problems=checked.findings)
    job = copy.deepcopy(checked.job)
    if namespace is None:
        job["metadata"].pop("namespace", None)
    done = convert_job(job, path, reader)
    _carry(done, [o for o in checked.objects if o is not checked.job], namespace is None)  # the chart's output claim
    done.changes = [Change(_values_path(c.path, job, values), c.v1, c.v2, c.fix) for c in done.changes]
    done.problems = [Finding(_values_path(f.path, job, values), f.message, f.value, f.hint) for f in done.problems]
    return done


def _values_path(path: str, job: dict, values: dict) -> str:
    """A path of the rendered PyTorchJob as the values key that set it, where one did. The user's
    own values decide between a role's key and the shared one."""
    role = "Master" if "Master" in job["spec"]["pytorchReplicaSpecs"] else "Worker"
    concrete = path.replace(".*.", f".{role}.").replace(f"containers[{admission.CONTAINER}]", "containers[0]")
    mapped = validation.values_path(concrete, {"job": {}, **values})
    if mapped == concrete and concrete.endswith(("containers[0].command", "containers[0].args")):
        return concrete.rsplit(".", 1)[1]  # the chart's command and args are the values' own
    if concrete.endswith(f".volumes[{OUTPUT_VOLUME}]") and (values.get("output") or {}).get("enabled"):
        return "output.mountOn"
    return mapped if mapped != concrete else path


def convert_job(job: dict, source: str, reader=None) -> Conversion:
    meta = job.get("metadata") or {}
    out = Conversion(source, str(meta.get("name", "")), meta.get("namespace"))
    problems = admission.check_objects([job]) or importer.kubernetes_findings(job)
    if problems:
        return out.refuse(problems)
    folded, changes, notes, problems = roles.fold(job)
    if problems:
        return out.refuse(problems)
    spec = folded["spec"]
    specs = spec["pytorchReplicaSpecs"]
    pod = (specs.get("Worker") or specs["Master"])["template"]["spec"]
    main = next(c for c in pod["containers"] if c.get("name") == admission.CONTAINER)
    trainer = programs.of("trainer")
    command = list(main.get("command") or [])
    if not command:
        if programs.repository(main.get("image", "")) != trainer.repository:
            command, why = _image_command(main, reader)
            if not command:
                return out.refuse([Finding(f"{MAIN}.command", "is empty, so the image's own ENTRYPOINT runs, which this "
                                           f"tool cannot see{why}; Trainer v2 must start the program through torchrun",
                                           None, "write the command into the job (e.g. [python, /workspace/train.py], as "
                                           "the image's ENTRYPOINT has it), or put the image into the registry on this "
                                           "machine (`python -m generator image load IMAGE`), or give --registry-config "
                                           "FILE where its own registry needs a login, then convert again")])
            notes.append(f"the command, {shlex.join(command)}, is {main['image']}'s own ENTRYPOINT"
                         f"{'' if main.get('args') else ' and CMD'}, read from {why}")
        else:
            command = list(trainer.entrypoint)
    try:
        v2_command, how = launch.through_torchrun(command)
    except launch.OldLauncher:
        return out.refuse([Finding(f"{MAIN}.command", f"starts {launch.OLD_LAUNCHER}, which passes --local_rank and "
                                   "cannot run under torchrun", command,
                                   f"start it with torchrun (or python -m {launch.TORCHRUN_MODULE}) and read LOCAL_RANK "
                                   "from the env, then convert again")])
    nproc = str(spec.get("nprocPerNode") or admission.DEFAULT_NPROC_PER_NODE)
    if how != launch.THROUGH_TORCHRUN and how != launch.TORCHRUN_AS_MODULE and nproc.isdigit() and int(nproc) > 1:
        return out.refuse([Finding("spec.nprocPerNode", f"is {nproc} with a command that does not start torchrun: v1 "
                                   f"started one process per pod and told it WORLD_SIZE for {nproc} per pod", nproc,
                                   "start the program through torchrun in the v1 job (one process per rank), or set "
                                   "nprocPerNode to 1, then convert again")])
    try:
        values, imported = importer.to_values(folded, source)
    except UserError as exc:
        return out.refuse(exc.findings)
    notes += [n for n in imported if not n.startswith("namespace ")]
    policy = _restart_policy(specs)
    run_policy = spec.get("runPolicy") or {}
    retries = _v1_retries(policy, run_policy.get("backoffLimit"))
    values.update(target="v2", command=v2_command)
    values.setdefault("topology", {})["nprocPerNode"] = nproc if nproc.isdigit() else ("1" if how == launch.HANDED_TO_TORCHRUN
                                                                                        else "")
    values["restartPolicy"] = "Never" if policy == "Never" else "OnFailure"
    rp = values.setdefault("runPolicy", {})
    rp.update(cleanPodPolicy="", schedulingPolicy={"queue": "", "priorityClass": "", "minAvailable": None})
    rp["backoffLimit"] = run_policy.get("backoffLimit") if retries else 0
    values["elasticPolicy"] = {"enabled": False}
    env = list(values.get("env") or [])
    v1_env = local_plan.operator_env(out.name, 0, 2, 1, nproc, 0, spec.get("elasticPolicy"), 0, "Master" in specs)
    # What the operator set beside the launch contract and torchrun's own variables (PYTHONUNBUFFERED) stays set.
    for name in [k for k in v1_env if k not in local_plan.CONTRACT_ENV and not k.startswith("PET_")]:
        if not any(e.get("name") == name for e in env):
            env.append({"name": name, "value": v1_env[name]})
            notes.append(f"env {name}={v1_env[name]}, which the operator set in every pod and Trainer does not, is "
                         "set in the TrainJob's env")
    values["env"] = env
    checked = validation.check_values(values, RELEASE, out.namespace or "default")
    if checked.findings:
        return out.refuse(checked.findings)
    objects = _cleaned([o for o in checked.objects if o.get("kind") != "PersistentVolumeClaim"], out.namespace is None)
    problems = runtime.check(objects)
    if problems:
        return out.refuse(problems)
    resolved = runtime.resolve(objects)
    out.objects = objects
    out.command = [*v2_command, *(main.get("args") or [])]
    out.changes = changes + _launch(out, command, main, how, v1_env, notes) + _nproc(spec, nproc, how, resolved) + \
        _restarts(policy, run_policy, retries, resolved, notes) + _success(spec, specs, resolved) + \
        _elastic(spec, resolved) + _scheduling(meta, run_policy, notes) + _cleanup(run_policy) + \
        _ports(values) + _pod_names(out.name, main)
    out.notes = notes
    return out


def _restart_policy(specs: dict) -> str:
    return next(iter(specs.values())).get("restartPolicy") or admission.DEFAULT_RESTART_POLICY


def _retried(policy: str) -> list[int]:
    """The exit codes after which the operator restarts a pod (the local runner's rule, the one source)."""
    return [code for code in EXIT_CODES if runner.retryable(policy, code)]


def _v1_retries(policy: str, backoff_limit: int | None) -> bool:
    return bool(_retried(policy)) and backoff_limit != 0


def _ranges(codes: list[int]) -> str:
    spans: list[list[int]] = []
    for code in codes:
        if spans and code == spans[-1][1] + 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def _cleaned(objects: list[dict], drop_namespace: bool) -> list[dict]:
    """Without the chart's own labels (nothing of a Helm release) and, with `drop_namespace` (objects
    the chart rendered in "default" for a job that named none), without a namespace; the runtime
    first, since Trainer refuses a TrainJob whose runtime does not exist yet."""
    objects = copy.deepcopy(objects)

    def strip(meta: dict) -> None:
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in importer.CHART_LABELS}
        meta.pop("labels", None)
        if labels:
            meta["labels"] = labels
        # the chart's TrainingRuntime is a Helm hook (so that Helm applies it before the TrainJob)
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith("helm.sh/hook")}
        meta.pop("annotations", None)
        if annotations:
            meta["annotations"] = annotations

    for obj in objects:
        strip(obj["metadata"])
        if drop_namespace:
            obj["metadata"].pop("namespace", None)
        for rjob in (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            template = rjob["template"]["spec"]["template"]
            strip(template.setdefault("metadata", {}))
            if not template["metadata"]:
                template.pop("metadata")
    return sorted(objects, key=kinds.TRAINJOB.owns)  # stable: the rest keep their order


def _image_command(container: dict, reader=None) -> tuple[list[str], str]:
    """(what a container that sets no command runs, the registry it was read from), read from its
    image's config; ([], why not) when no registry gave it."""
    from generator.images import distribution

    image = container.get("image") or ""
    try:
        found = (reader or distribution.Reader()).config(image)
    except distribution.Unreadable as exc:
        return [], f" ({exc})"
    command = found.config.runs(container.get("args"))
    return command, (found.where if command else f" ({image}'s config names neither ENTRYPOINT nor CMD)")


def _launch(out: Conversion, command: list[str], main: dict, how: str, v1_env: dict, notes: list[str]) -> list[Change]:
    args = list(main.get("args") or [])
    if how == launch.TORCHRUN_AS_MODULE:
        notes.append(f"`python -m {launch.TORCHRUN_MODULE}` is torchrun: every node starts `{shlex.join(out.command)}`")
    if how != launch.HANDED_TO_TORCHRUN:
        return []
    gone = [k for k in local_plan.CONTRACT_ENV if k in v1_env and not k.startswith("PET_")]  # torchrun's to set now
    return [Change(f"{MAIN}.command",
                   f"`{shlex.join(command + args)}` ran once per pod, with {', '.join(gone)} set by the operator "
                   "(RANK the pod's rank)",
                   f"every node runs `{shlex.join(out.command)}`: Trainer sets only {', '.join(runtime.RESERVED_ENV)}, "
                   "and torchrun gives each process RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
                   "nothing, if the program reads its ranks from the env (init_process_group's env:// does); a program "
                   "that starts its own processes per pod must leave that to torchrun")]


def _nproc_v1(nproc: str) -> str:
    if nproc.isdigit():
        return f"{nproc} process(es) per pod"
    return {"gpu": "one process per GPU of the pod",
            "cpu": "one process per CPU of the machine the pod landed on"}.get(
        nproc, "torchrun's auto: one process per GPU, or without GPUs one per CPU of the machine the pod landed on")


def _nproc(spec: dict, nproc: str, how: str, resolved: runtime.Resolved) -> list[Change]:
    if how == launch.HANDED_TO_TORCHRUN or nproc.isdigit():
        return []  # one process per pod before and after, or the same count
    if resolved.nproc == "auto" and nproc in ("auto", "gpu"):
        return []  # torchrun counts the node's GPUs both ways
    written = spec.get("nprocPerNode")
    return [Change("spec.nprocPerNode", f"{written or 'unset, so ' + admission.DEFAULT_NPROC_PER_NODE}: {_nproc_v1(nproc)}",
                   f"numProcPerNode unset: Trainer starts {resolved.nproc} process(es) per node (the CPUs of "
                   "resourcesPerNode, at least 1, when the node has no GPUs)",
                   "write the number of processes per pod as spec.nprocPerNode in the v1 job and convert again")]


def _restarts(policy: str, run_policy: dict, retries: bool, resolved: runtime.Resolved, notes: list[str]) -> list[Change]:
    limit = run_policy.get("backoffLimit")
    v2_retries = resolved.node_backoff_limit > 0 or resolved.max_set_restarts > 0
    if not retries and not v2_retries:
        if limit:
            notes.append(f"runPolicy.backoffLimit {limit} never applied under restartPolicy {policy}; "
                         "the TrainJob fails at its first failure, as the PyTorchJob did")
        return []
    codes = _retried(policy)
    if not codes:
        v1 = f"restartPolicy {policy}: a failed pod failed the job"
    elif codes == list(EXIT_CODES):
        v1 = f"restartPolicy {policy}: a failed pod restarted alone, in place"
    else:
        v1 = (f"restartPolicy {policy}: a pod that exited {_ranges(codes)} restarted alone; any other exit code failed "
              "the job at once")
    if runner.retryable(policy, 0):
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


def _success(spec: dict, specs: dict, resolved: runtime.Resolved) -> list[Change]:
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


def _elastic(spec: dict, resolved: runtime.Resolved) -> list[Change]:
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


def _scheduling(meta: dict, run_policy: dict, notes: list[str]) -> list[Change]:
    out = []
    queue = (meta.get("labels") or {}).get(importer.KUEUE_LABEL)
    if queue:
        out.append(Change(f"metadata.labels[{importer.KUEUE_LABEL}]",
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
                          f"Kueue ({importer.KUEUE_LABEL})"))
    return out


def _cleanup(run_policy: dict) -> list[Change]:
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


def _ports(values: dict) -> list[Change]:
    extra = values.get("extraPorts") or []
    if not extra:
        return []
    named = ", ".join(str(p.get("name") or p.get("containerPort")) for p in extra)
    return [Change(f"{MAIN}.ports", f"the training container declared ports {named}",
                   f"the node container declares only Trainer's port {runtime.MASTER_PORT}",
                   "point probes and Services at port numbers rather than these names, or serve them from a sidecar")]


def _pod_names(name: str, main: dict) -> list[Change]:
    """Args or env that name v1's pods, which v2 does not make."""
    texts = [*(main.get("args") or []), *(main.get("command") or []),
             *(str(e.get("value", "")) for e in main.get("env") or [])]
    v1_pods = (f"{name}-master-", f"{name}-worker-")
    if not any(p in str(t) for t in texts for p in v1_pods):
        return []
    return [Change(f"{MAIN}.args/env", f"they name the operator's pods ({name}-master-0, {name}-worker-<i>)",
                   f"those pods do not exist: v2's are {name}-node-0-<i>, node 0 reached as {name}-node-0-0.{name}",
                   "use $(PET_MASTER_ADDR), which Trainer sets, instead of a pod name")]
