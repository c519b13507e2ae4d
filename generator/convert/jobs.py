"""Every job a file holds (PyTorchJob manifests, or v1 values) to a TrainJob and, where the job
needs one, its TrainingRuntime (convert/job.py), with what the file holds beside them carried."""
from __future__ import annotations

import copy

from generator import kinds
from generator.convert.job import cleaned, convert_job
from generator.convert.report import Change, Conversion
from generator.errors import Finding, UserError
from generator.job import validation, values_io
from generator.kinds.pytorchjob import admission, values_paths

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
    refused = kind.not_convertible(from_values=False)
    if refused:
        return [Conversion(path, "", problems=[refused])]
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
        conversion.objects[:0] = cleaned(others, drop_namespace)
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
    kind = kinds.for_values(values)
    refused = kind.not_convertible(from_values=True)
    if refused:
        return Conversion(path, "", problems=[refused])
    checked = validation.check_values({**values, "target": kind.target}, kind, release, namespace or "default")
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
    mapped = values_paths.values_path(concrete, {"job": {}, **values})
    if mapped == concrete and concrete.endswith(("containers[0].command", "containers[0].args")):
        return concrete.rsplit(".", 1)[1]  # the chart's command and args are the values' own
    if concrete.endswith(f".volumes[{OUTPUT_VOLUME}]") and (values.get("output") or {}).get("enabled"):
        return "output.mountOn"
    return mapped if mapped != concrete else path
