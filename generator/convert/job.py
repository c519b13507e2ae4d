"""One PyTorchJob to a TrainJob and, where the job needs one, its TrainingRuntime, with each
change in meaning (convert/meaning.py)."""
from __future__ import annotations

import copy
import shlex

from generator import kinds
from generator.container import programs
from generator.convert import launch, meaning, roles
from generator.convert.report import Conversion
from generator.errors import Finding, UserError
from generator.job import validation
from generator.job.imports import CHART_LABELS
from generator.kinds.pytorchjob import admission, importer
from generator.kinds.pytorchjob.contract import CONTRACT_ENV, JobEnv, operator_env
from generator.kinds.trainjob import runtime

RELEASE = "convert"


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
    try:
        command = _v1_command(main, reader, notes)
        v2_command, how = _through_torchrun(command)
        nproc = _nproc_per_node(spec, how)
        values, imported = importer.to_values(folded, source)
    except UserError as exc:
        return out.refuse(exc.findings)
    notes += [n for n in imported if not n.startswith("namespace ")]
    policy = _restart_policy(specs)
    run_policy = spec.get("runPolicy") or {}
    retries = meaning.v1_retries(policy, run_policy.get("backoffLimit"))
    values.update(target=kinds.TRAINJOB.target, command=v2_command)
    values.setdefault("topology", {})["nprocPerNode"] = nproc if nproc.isdigit() else ("1" if how == launch.HANDED_TO_TORCHRUN
                                                                                        else "")
    # A Job's pods take only some of v1's policies; the rest become JobSet's default (meaning.restarts says what changes).
    values["restartPolicy"] = policy if policy in runtime.RESTART_POLICIES else runtime.DEFAULT_RESTART_POLICY
    rp = values.setdefault("runPolicy", {})
    rp.update(cleanPodPolicy="", schedulingPolicy={"queue": "", "priorityClass": "", "minAvailable": None})
    rp["backoffLimit"] = run_policy.get("backoffLimit") if retries else 0
    values["elasticPolicy"] = {"enabled": False}
    # What the operator gives every pod beside ranks and addresses (here a first of two pods).
    v1_env = operator_env(JobEnv(pods=2, per_pod=1, nproc=nproc, port=0, elastic=spec.get("elasticPolicy"),
                                 has_master="Master" in specs, rdzv="127.0.0.1:0"), rank=0)
    values["env"] = _kept_operator_env(values.get("env"), v1_env, notes)
    checked = validation.check_values(values, kinds.TRAINJOB, RELEASE, out.namespace or "default")
    if checked.findings:
        return out.refuse(checked.findings)
    objects = cleaned([o for o in checked.objects if o.get("kind") != "PersistentVolumeClaim"], out.namespace is None)
    problems = runtime.check(objects)
    if problems:
        return out.refuse(problems)
    resolved = runtime.resolve(objects)
    out.objects = objects
    out.command = [*v2_command, *(main.get("args") or [])]
    out.changes = changes + meaning.launch_changes(out, command, main, how, v1_env, notes) + \
        meaning.nproc_changes(spec, nproc, how, resolved) + meaning.restarts(policy, run_policy, retries, resolved, notes) + \
        meaning.success(spec, specs, resolved) + meaning.elastic(spec, resolved) + \
        meaning.scheduling(meta, run_policy, notes) + meaning.cleanup(run_policy) + meaning.ports(values) + \
        meaning.pod_names(out.name, main)
    out.notes = notes
    return out


def _v1_command(main: dict, reader, notes: list[str]) -> list[str]:
    """What the v1 job's container runs: its command, else its image's ENTRYPOINT (the trainer's is
    known, another's is read from its registry, with a note saying so). Raises UserError when no
    registry gave it: Trainer v2 must start the program through torchrun."""
    command = list(main.get("command") or [])
    if command:
        return command
    trainer = programs.of("trainer")
    if programs.repository(main.get("image", "")) == trainer.repository:
        return list(trainer.entrypoint)
    command, why = _image_command(main, reader)
    if not command:
        raise UserError([Finding(f"{meaning.MAIN}.command", "is empty, so the image's own ENTRYPOINT runs, which this "
                                 f"tool cannot see{why}; Trainer v2 must start the program through torchrun",
                                 None, "write the command into the job (e.g. [python, /workspace/train.py], as "
                                 "the image's ENTRYPOINT has it), or put the image into the registry on this "
                                 "machine (`python -m generator image load IMAGE`), or give --registry-config "
                                 "FILE where its own registry needs a login, then convert again")])
    notes.append(f"the command, {shlex.join(command)}, is {main['image']}'s own ENTRYPOINT"
                 f"{'' if main.get('args') else ' and CMD'}, read from {why}")
    return command


def _through_torchrun(command: list[str]) -> tuple[list[str], str]:
    """launch.through_torchrun, with the old launcher refused as a finding."""
    try:
        return launch.through_torchrun(command)
    except launch.OldLauncher:
        raise UserError([Finding(f"{meaning.MAIN}.command", f"starts {launch.OLD_LAUNCHER}, which passes --local_rank "
                                 "and cannot run under torchrun", command,
                                 f"start it with torchrun (or python -m {launch.TORCHRUN_MODULE}) and read LOCAL_RANK "
                                 "from the env, then convert again")]) from None


def _nproc_per_node(spec: dict, how: str) -> str:
    """The job's nprocPerNode; refused above 1 for a command that does not start torchrun (v1 ran one
    process per pod, which torchrun under Trainer v2 would multiply)."""
    nproc = str(spec.get("nprocPerNode") or admission.DEFAULT_NPROC_PER_NODE)
    if how != launch.THROUGH_TORCHRUN and how != launch.TORCHRUN_AS_MODULE and nproc.isdigit() and int(nproc) > 1:
        raise UserError([Finding("spec.nprocPerNode", f"is {nproc} with a command that does not start torchrun: v1 "
                                 f"started one process per pod and told it WORLD_SIZE for {nproc} per pod", nproc,
                                 "start the program through torchrun in the v1 job (one process per rank), or set "
                                 "nprocPerNode to 1, then convert again")])
    return nproc


def _kept_operator_env(env: list[dict] | None, v1_env: dict[str, str], notes: list[str]) -> list[dict]:
    """The TrainJob's env: the job's own, then what the operator set beside the launch contract and
    torchrun's own variables (PYTHONUNBUFFERED), which stays set, each with a note."""
    env = list(env or [])
    for name in [k for k in v1_env if k not in CONTRACT_ENV and not k.startswith("PET_")]:
        if not any(e.get("name") == name for e in env):
            env.append({"name": name, "value": v1_env[name]})
            notes.append(f"env {name}={v1_env[name]}, which the operator set in every pod and Trainer does not, is "
                         "set in the TrainJob's env")
    return env


def _restart_policy(specs: dict) -> str:
    return next(iter(specs.values())).get("restartPolicy") or admission.DEFAULT_RESTART_POLICY



def cleaned(objects: list[dict], drop_namespace: bool) -> list[dict]:
    """Without the chart's own labels (nothing of a Helm release) and, with `drop_namespace` (objects
    the chart rendered in "default" for a job that named none), without a namespace; the runtime
    first, since Trainer refuses a TrainJob whose runtime does not exist yet."""
    objects = copy.deepcopy(objects)

    def strip(meta: dict) -> None:
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in CHART_LABELS}
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
    from generator.images import distribution, manifests

    image = container.get("image") or ""
    try:
        found = (reader or distribution.Reader()).config(image)
    except manifests.Unreadable as exc:
        return [], f" ({exc})"
    command = found.config.runs(container.get("args"))
    return command, (found.where if command else f" ({image}'s config names neither ENTRYPOINT nor CMD)")
