"""A job from what the user hands over: a PyTorchJob or Trainer v2 TrainJob manifest taken as it
is, or a values file rendered through the chart (for either target). Checked either way before
anything runs or is applied."""
from __future__ import annotations

from generator.errors import Finding, UserError
from generator.job import admission, runtime, validation, values_io


def pick(documents: list, source: str) -> dict:
    """The one PyTorchJob among a file's documents."""
    if not documents:
        raise UserError([Finding("", "is empty", hint="give a file with one PyTorchJob")], source=source)
    jobs = [d for d in documents if isinstance(d, dict) and d.get("kind") == "PyTorchJob"]
    if not jobs:
        kinds = [d.get("kind") if isinstance(d, dict) else type(d).__name__ for d in documents]
        raise UserError([Finding("kind", "no PyTorchJob in the file", kinds,
                                 hint="give a kubeflow.org/v1 PyTorchJob manifest")], source=source)
    if len(jobs) > 1:
        raise UserError([Finding("", f"holds {len(jobs)} PyTorchJobs", [j.get("metadata", {}).get("name") for j in jobs],
                                 hint="split the file: one job per file")], source=source)
    return jobs[0]


def load(file: str, release: str, namespace: str, target: str | None = None) -> list[dict]:
    """The objects to run or apply: the manifest's documents, or what the chart renders.
    Both go through the same admission rules first."""
    return read(file, release, namespace, target)[0]


def read(file: str, release: str, namespace: str, target: str | None = None) -> tuple[list[dict], bool]:
    """load's objects, and whether the chart rendered them from values (the file read once).
    `target` (v1, v2) overrides the values' own; a manifest is what it is."""
    documents = values_io.load_documents(file)
    if runtime.is_trainjob(documents):
        objects = [d for d in documents if isinstance(d, dict)]
        findings = runtime.check(objects)
        if findings:
            raise UserError(findings, source=file)
        return objects, False
    if is_manifest(documents):
        pick(documents, file)
        objects = [d for d in documents if isinstance(d, dict)]
        findings = admission.check_objects(objects)
        if findings:
            raise UserError(findings, source=file)
        return objects, False
    values = values_io.mapping_of(documents, file)
    checked = validation.check_values({**values, "target": target} if target else values, release, namespace)
    if checked.findings:
        raise UserError(checked.findings, source=file)
    if runtime.is_trainjob(checked.objects):
        findings = runtime.check(checked.objects)
        if findings:
            raise UserError(findings, source=file)
    return checked.objects, True


def is_manifest(documents: list) -> bool:
    return any(isinstance(d, dict) and d.get("kind") == "PyTorchJob" for d in documents)


def pytorchjob(objects: list[dict]) -> dict:
    return next(o for o in objects if o.get("kind") == "PyTorchJob")
