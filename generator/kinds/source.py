"""A job from what the user hands over: a manifest of any kind taken as it is, or a values file
rendered through the chart (for either target). Checked by its kind's admission either way
before anything runs or is applied."""
from __future__ import annotations

from dataclasses import dataclass

from generator import kinds
from generator.errors import UserError
from generator.job import validation, values_io
from generator.kinds.base import JobKind


@dataclass
class Read:
    """A file's job, read once: the objects to run or apply, their kind (decided here), and whether
    the chart rendered them from values."""
    objects: list[dict]
    kind: JobKind
    rendered: bool

    @property
    def job(self) -> dict:
        return self.kind.job_of(self.objects)


def read(file: str, release: str, namespace: str, target: str | None = None) -> Read:
    """The manifest's documents, or what the chart renders from values; both go through their
    kind's admission rules first. `target` (v1, v2) overrides the values' own; a manifest is what it is."""
    documents = values_io.load_documents(file)
    kind = kinds.in_manifest(documents)
    if kind is not None:
        objects = [d for d in documents if isinstance(d, dict)]
        findings = kind.check(objects, file)
        if findings:
            raise UserError(findings, source=file)
        return Read(objects, kind, False)
    values = values_io.mapping_of(documents, file)
    values = {**values, "target": target} if target else values
    kind = kinds.for_values(values)
    checked = validation.check_values(values, kind, release, namespace)
    if checked.findings:
        raise UserError(checked.findings, source=file)
    findings = kind.check_rendered(checked.objects)
    if findings:
        raise UserError(findings, source=file)
    return Read(checked.objects, kind, True)


def check_file(path: str, release: str = "release", chart: str = "pytorchjob", target: str | None = None,
               reader=None) -> validation.Checked:
    """`validate` of one file: a values file or a job's manifest (a PyTorchJob; a TrainJob with the
    runtime it names, when that is in the file), told apart by their content as `read` tells them;
    with chart "pytorch-operator", values for the operator chart. Only the findings and warnings
    are set. Pods that leave the command to the image are also checked against the image's config
    (the kind's image_warnings), read with `reader` (images/distribution.py's; None: without logins)."""
    documents = values_io.load_documents(path)
    if chart == "pytorch-operator":
        return validation.Checked(validation.check_operator_values(values_io.mapping_of(documents, path), release).findings)
    kind = kinds.in_manifest(documents)
    if kind is not None:  # the same check `run` and `submit` give a manifest
        objects = [d for d in documents if isinstance(d, dict)]
        findings = kind.check(objects, path)
        if findings:
            return validation.Checked(findings)
        return validation.Checked([], warnings=kind.advice(objects) + kind.image_warnings(kind.job_of(objects), reader))
    values = values_io.mapping_of(documents, path)
    values = {**values, "target": target} if target else values
    kind = kinds.for_values(values)
    checked = validation.check_values(values, kind, release)
    more = kind.image_warnings(checked.job, reader, as_values=True) if checked.job and not checked.findings else []
    return validation.Checked(checked.findings, warnings=checked.warnings + more)
