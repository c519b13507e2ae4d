"""Master and Worker folded into the one pod every Trainer v2 node runs. What both roles set alike
folds at once; a volume (and its mount) that one role alone has is added to every node, since v2
cannot mount it on one; anything else that differs is refused by its path."""
from __future__ import annotations

import copy

from generator.convert.report import Change
from generator.errors import Finding
from generator.kinds.pytorchjob import admission

ROLES = "spec.pytorchReplicaSpecs"
SAME_HINT = ("Trainer v2 runs every node from one pod template: make the Master's and the Worker's equal (or drop the "
             "setting from both), then convert again")


def _empty(value: object) -> object:
    return None if value in ({}, [], "", None) else value


def _differs(path: str, master: object, worker: object, out: list[Finding]) -> None:
    if _empty(master) != _empty(worker):
        out.append(Finding(path, "differs between Master and Worker", {"Master": master, "Worker": worker}, SAME_HINT))


def fold(job: dict) -> tuple[dict, list[Change], list[str], list[Finding]]:
    """(the job with one pod template for both roles, changes, notes, refusals)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    if len(specs) < 2:
        return job, [], [], []
    job = copy.deepcopy(job)
    specs = job["spec"]["pytorchReplicaSpecs"]
    master, worker = specs["Master"], specs["Worker"]
    problems: list[Finding] = []
    _differs(f"{ROLES}.*.restartPolicy", master.get("restartPolicy") or admission.DEFAULT_RESTART_POLICY,
             worker.get("restartPolicy") or admission.DEFAULT_RESTART_POLICY, problems)
    mt, wt = master.get("template") or {}, worker.get("template") or {}
    mmeta, wmeta = mt.get("metadata") or {}, wt.get("metadata") or {}
    for key in sorted(set(mmeta) | set(wmeta)):
        _differs(f"{ROLES}.*.template.metadata.{key}", mmeta.get(key), wmeta.get(key), problems)
    mpod, wpod = mt.get("spec") or {}, wt.get("spec") or {}
    for key in sorted((set(mpod) | set(wpod)) - {"containers", "volumes"}):
        _differs(f"{ROLES}.*.template.spec.{key}", mpod.get(key), wpod.get(key), problems)
    mcons = {c.get("name"): c for c in mpod.get("containers") or []}
    wcons = {c.get("name"): c for c in wpod.get("containers") or []}
    for name in sorted(set(mcons) | set(wcons), key=lambda n: (n != admission.CONTAINER, str(n))):
        where = f"{ROLES}.*.template.spec.containers[{name}]"
        mc, wc = mcons.get(name), wcons.get(name)
        if name != admission.CONTAINER or mc is None or wc is None:
            _differs(where, mc, wc, problems)
            continue
        for key in sorted((set(mc) | set(wc)) - {"volumeMounts"}):
            _differs(f"{where}.{key}", mc.get(key), wc.get(key), problems)
    volumes, changes, notes = _volumes(job, mpod, wpod, mcons, wcons, problems)
    if problems:
        return job, [], [], problems
    # The Master's pod with the union of both roles' volumes is now every node's.
    pod = copy.deepcopy(mpod)
    main = next(c for c in pod["containers"] if c.get("name") == admission.CONTAINER)
    if volumes[0]:
        pod["volumes"] = volumes[0]
    if volumes[1]:
        main["volumeMounts"] = volumes[1]
    for spec in (master, worker):
        spec["template"] = {**copy.deepcopy(mt), "spec": copy.deepcopy(pod)}
    return job, changes, notes, []


def _volumes(job, mpod, wpod, mcons, wcons, problems) -> tuple[tuple[list, list], list[Change], list[str]]:
    """The union of both roles' volumes and the training container's mounts; a change for each
    claim that one role alone mounted, a note for any other volume that it alone had."""
    mvols = {v.get("name"): v for v in mpod.get("volumes") or []}
    wvols = {v.get("name"): v for v in wpod.get("volumes") or []}
    mounts = {"Master": {m.get("mountPath"): m for m in mcons[admission.CONTAINER].get("volumeMounts") or []},
              "Worker": {m.get("mountPath"): m for m in wcons[admission.CONTAINER].get("volumeMounts") or []}}
    for name in sorted(set(mvols) & set(wvols), key=str):
        _differs(f"{ROLES}.*.template.spec.volumes[{name}]", mvols[name], wvols[name], problems)
    for path in sorted(set(mounts["Master"]) & set(mounts["Worker"]), key=str):
        _differs(f"{ROLES}.*.template.spec.containers[{admission.CONTAINER}].volumeMounts[{path}]",
                 mounts["Master"][path], mounts["Worker"][path], problems)
    volumes = list(mvols.values()) + [v for n, v in wvols.items() if n not in mvols]
    mount_list = list(mounts["Master"].values()) + [m for p, m in mounts["Worker"].items() if p not in mounts["Master"]]
    changes, notes = [], []
    nodes = sum(int(s.get("replicas", 1)) for s in job["spec"]["pytorchReplicaSpecs"].values())
    for role, own, other in (("Master", mvols, wvols), ("Worker", wvols, mvols)):
        for name, volume in own.items():
            if name in other:
                continue
            where = [p for p, m in mounts[role].items() if m.get("name") == name]
            at = f" at {', '.join(map(str, where))}" if where else ""
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                changes.append(Change(
                    f"{ROLES}.{role}.template.spec.volumes[{name}]",
                    f"claim {claim} mounted{at} on the {role} alone",
                    f"mounted{at} on every node ({nodes}): all nodes run one pod template",
                    f"make {claim} a ReadWriteMany claim (a ReadWriteOnce one holds only while every node lands on one "
                    "machine), and let rank 0 alone write there (the project's trainer does)"))
            else:
                notes.append(f"volume {name}{at}, which the {role} alone had, is on every node now")
    return (volumes, mount_list), changes, notes
