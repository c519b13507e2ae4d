"""`convert --server`: each converted TrainJob, and its TrainingRuntime, through the cluster's own
admission (its CRD schemas and Trainer's webhooks) as a server-side dry run: nothing is kept."""
from __future__ import annotations

import copy
import dataclasses

from generator import kinds
from generator.cluster import client as api
from generator.convert.report import Conversion
from generator.errors import Finding, UserError


def check(cluster: api.Cluster, conversion: Conversion) -> None:
    """Refuses the conversion with what the server refused, by object; notes what it could not check."""
    if not conversion.objects:
        return
    objects = copy.deepcopy(conversion.objects)
    kind = kinds.for_objects(objects)
    job = kind.job_of(objects)
    namespace = job["metadata"].get("namespace") or cluster.namespace
    here = dataclasses.replace(cluster, namespace=namespace)
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    problems: list[Finding] = []
    missing_runtime = False
    for plural, companion in kind.companions(objects):
        name = companion["metadata"]["name"]
        missing_runtime = api.get_custom(here, *companion["apiVersion"].split("/"), plural, name) is None
        try:
            api.apply_custom(here, companion, plural, dry_run=True)
        except UserError as exc:
            problems.append(Finding(f"{companion['kind']}/{name}", exc.describe(), hint="fix the v1 job, then convert again"))
    admitted = True
    try:
        api.apply_job(here, job, True, kind)
    except UserError as exc:
        text = exc.describe()
        admitted = False
        if missing_runtime and "spec.runtimeRef" in text:
            # Trainer's webhook looks the runtime up, and a dry run creates none: the rest passed.
            conversion.notes.append(f"the server checked {kind.kind} {job['metadata']['name']} but for its runtime, which "
                                    "Trainer's webhook reads from the cluster and a dry run does not create")
        else:
            problems.append(Finding(f"{kind.kind}/{job['metadata']['name']}", text, hint="fix the v1 job, then convert again"))
    if problems:
        conversion.refuse(problems)
    elif admitted:
        conversion.notes.append(f"the cluster at {cluster.server} (namespace {namespace}) admitted it in a dry run")
