"""The PyTorchJob CRD of charts/pytorch-operator: a structural schema under the apiextensions
rules, with the subresources and columns kubectl relies on, accepting every PyTorchJob shape
we know of."""

import pytest
import yaml

from tests.support import MANIFESTS, kube, our_manifests, upstream_examples

FORBIDDEN = {"$ref", "definitions", "dependencies", "patternProperties", "additionalItems", "id", "$schema"}
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(node, path="openAPIV3Schema", in_junctor=False):
    """The apiextensions.k8s.io/v1 structural-schema rules, node by node."""
    out = []
    if not isinstance(node, dict):
        return [f"{path}: not a schema object"]
    for key in FORBIDDEN & node.keys():
        out.append(f"{path}: {key} is not allowed in a structural schema")
    if node.get("uniqueItems") is True:
        out.append(f"{path}: uniqueItems must not be true")
    if node.get("additionalProperties") is False:
        out.append(f"{path}: additionalProperties false is not allowed (pruning does that)")
    if "properties" in node and "additionalProperties" in node:
        out.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if isinstance(node.get("items"), list):
        out.append(f"{path}: items must be one schema")
    if in_junctor:
        for key in ("description", "type", "default", "additionalProperties", "nullable"):
            if key in node:
                out.append(f"{path}: {key} inside a logical junctor")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if not in_junctor and "type" not in node and not int_or_string \
            and node.get("x-kubernetes-preserve-unknown-fields") is not True:
        out.append(f"{path}: no type")
    if int_or_string and node.get("anyOf") != INT_OR_STRING:
        out.append(f"{path}: x-kubernetes-int-or-string needs anyOf [integer, string]")
    for name, child in (node.get("properties") or {}).items():
        out += structural_problems(child, f"{path}.properties.{name}", in_junctor)
    if isinstance(node.get("additionalProperties"), dict):
        out += structural_problems(node["additionalProperties"], f"{path}.additionalProperties", in_junctor)
    if isinstance(node.get("items"), dict):
        out += structural_problems(node["items"], f"{path}.items", in_junctor)
    for junctor in JUNCTORS:
        children = node.get(junctor)
        if children is None or (int_or_string and junctor == "anyOf"):
            continue
        for i, child in enumerate(children if isinstance(children, list) else [children]):
            out += structural_problems(child, f"{path}.{junctor}[{i}]", True)
    return out


def version():
    return kube.crd()["spec"]["versions"][0]


def test_crd_names_group_and_scope():
    crd = kube.crd()
    assert crd["metadata"]["name"] == "pytorchjobs.kubeflow.org"
    assert crd["spec"]["group"] == "kubeflow.org" and crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == "PyTorchJob" and crd["spec"]["names"]["plural"] == "pytorchjobs"
    assert version()["name"] == "v1" and version()["served"] and version()["storage"]


def test_schema_is_structural():
    assert structural_problems(version()["schema"]["openAPIV3Schema"]) == []


def test_structural_check_catches_violations():
    bad = {"type": "object", "properties": {"a": {"description": "untyped"},
                                            "b": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
                                            "c": {"$ref": "#/x"}}}
    problems = structural_problems(bad)
    assert any("a: no type" in p for p in problems)
    assert any("uniqueItems" in p for p in problems) and any("$ref" in p for p in problems)


def test_status_and_scale_subresources_and_printer_columns():
    v = version()
    assert v["subresources"]["status"] == {}
    assert v["subresources"]["scale"] == {
        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector"}
    columns = {c["name"]: c for c in v["additionalPrinterColumns"]}
    assert columns["State"]["jsonPath"] == ".status.conditions[-1:].type"
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_pytorchjob_level_fields_are_typed():
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    replica = spec["pytorchReplicaSpecs"]["additionalProperties"]["properties"]
    assert replica["restartPolicy"]["enum"] == ["Always", "OnFailure", "Never", "ExitCode"]
    assert spec["runPolicy"]["properties"]["cleanPodPolicy"]["enum"] == ["All", "Running", "None"]
    assert spec["nprocPerNode"]["type"] == "string"
    assert spec["elasticPolicy"]["properties"]["rdzvBackend"]["enum"] == ["c10d", "etcd", "etcd-v2"]


def test_a_ports_protocol_defaults_to_tcp_in_every_container_as_for_a_pod():
    # Kueue compares a job's pod templates with its Workload's, whose CRD defaults the protocol:
    # without this default here, Kueue deletes and remakes the Workload of any job with a port, forever.
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    pod = spec["pytorchReplicaSpecs"]["additionalProperties"]["properties"]["template"]["properties"]["spec"]
    assert pod["x-kubernetes-preserve-unknown-fields"] is True  # the rest of the pod stays Kubernetes' to judge
    for containers in ("initContainers", "containers"):
        port = pod["properties"][containers]["items"]["properties"]["ports"]["items"]
        assert port["properties"]["protocol"] == {"type": "string", "default": "TCP"}
        assert port["x-kubernetes-preserve-unknown-fields"] is True


OURS = sorted(MANIFESTS.glob("*.yaml"))


@pytest.mark.parametrize("manifest", our_manifests() + upstream_examples())
def test_crd_accepts_known_pytorchjobs(manifest):
    for job in yaml.safe_load_all(manifest.read_text()):
        if job and job.get("kind") == "PyTorchJob":
            assert kube.crd_problems(job) == []


@pytest.mark.parametrize("mutate, where", [
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(restartPolicy="Sometimes"), "restartPolicy"),
    (lambda j: j["spec"].update(nprocPerNode=2), "nprocPerNode"),
    (lambda j: j["spec"].update(runPolicy={"cleanPodPolicy": "Some"}), "cleanPodPolicy"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="two"), "replicas"),
    (lambda j: j["spec"].pop("pytorchReplicaSpecs"), "pytorchReplicaSpecs"),
])
def test_crd_rejects_malformed_pytorchjobs(mutate, where):
    job = yaml.safe_load((MANIFESTS / "vsphere-cpu.yaml").read_text())
    mutate(job)
    problems = kube.crd_problems(job)
    assert problems and any(where in p for p in problems), problems
