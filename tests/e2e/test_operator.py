"""The operator chart on the shared control plane (leader election on), and what the real
operator does with the jobs the generator renders."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.support import scenarios
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
WEBHOOK = "validator.pytorchjob.training-operator.kubeflow.org"


def _custom(cluster):
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api())


def _core(cluster):
    from kubernetes import client

    return client.CoreV1Api(cluster.api())


def _ensure_namespace(cluster, name):
    from kubernetes import client

    try:
        _core(cluster).create_namespace({"metadata": {"name": name}})
    except client.ApiException as exc:
        assert exc.status == 409


def test_the_crd_is_established_and_served(cluster):
    from kubernetes import client

    crd = client.ApiextensionsV1Api(cluster.api()).read_custom_resource_definition("pytorchjobs.kubeflow.org")
    assert {(c.type, c.status) for c in crd.status.conditions} >= {("Established", "True"), ("NamesAccepted", "True")}
    assert [v.name for v in crd.spec.versions if v.served] == ["v1"]


V1_SCENARIOS = [n for n in scenarios.names("pytorchjob") if scenarios.values("pytorchjob", n).get("target") != "v2"]
V2_SCENARIOS = [n for n in scenarios.names("pytorchjob") if n not in V1_SCENARIOS]


@pytest.mark.parametrize("name", V1_SCENARIOS)
def test_every_job_scenario_is_accepted_by_the_api_server_and_the_webhook(cluster, name):
    from kubernetes import client

    _ensure_namespace(cluster, scenarios.NAMESPACE)
    job = next(o for o in scenarios.render_objects("pytorchjob", name) if o["kind"] == "PyTorchJob")
    api = _custom(cluster)
    args = ("kubeflow.org", "v1", scenarios.NAMESPACE, "pytorchjobs")
    dry = api.create_namespaced_custom_object(*args, job, dry_run="All")
    assert dry["metadata"]["name"] == job["metadata"]["name"]
    created = api.create_namespaced_custom_object(*args, job)
    try:
        assert created["spec"]["pytorchReplicaSpecs"].keys() == job["spec"]["pytorchReplicaSpecs"].keys()
        assert created["metadata"]["uid"]
    finally:
        api.delete_namespaced_custom_object(*args, job["metadata"]["name"],
                                            body=client.V1DeleteOptions(propagation_policy="Foreground"))


def test_the_webhook_refuses_what_only_it_checks_with_the_operators_message(cluster):
    from kubernetes import client

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "two-masters"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2, "template": {"spec": {
               "containers": [{"name": "pytorch", "image": "ghcr.io/pytorchjob-kit/trainer:0.1.0"}]}}}}}}
    with pytest.raises(client.ApiException) as refused:
        _custom(cluster).create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", job)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403
    assert message == (f'admission webhook "{WEBHOOK}" denied the request: '
                       "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1")


def test_the_webhook_certificate_is_the_operators_own(cluster):
    from kubernetes import client

    api = cluster.api()
    config = client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
        "validator.training-operator.kubeflow.org")
    secrets = _core(cluster).list_namespaced_secret("kubeflow").items
    cert = next(s for s in secrets if s.metadata.name.endswith("webhook-cert"))
    assert {"ca.crt", "tls.crt", "tls.key"} <= set(cert.data)
    assert all(w.client_config.ca_bundle == cert.data["ca.crt"] for w in config.webhooks)


def test_the_operator_can_read_no_secret_but_its_own(cluster):
    """`kubectl auth can-i` as the operator's ServiceAccount, answered by the API server's RBAC."""
    import subprocess

    from generator.controlplane import build

    account = "system:serviceaccount:kubeflow:training-operator-pytorch-operator"
    assert _core(cluster).read_namespaced_service_account(account.rsplit(":", 1)[1], "kubeflow")

    def can(*words: str) -> str:
        done = subprocess.run([str(build.binary("kubectl")), "auth", "can-i", *words, f"--as={account}"],
                              env=cluster.env, capture_output=True, text=True, timeout=60)
        return done.stdout.strip()

    own = "secret/training-operator-pytorch-operator-webhook-cert"
    assert [can(verb, own, "-n", "kubeflow") for verb in ("get", "update")] == ["yes", "yes"]
    assert can("get", "secret/other", "-n", "kubeflow") == "no"
    assert can("list", "secrets", "-n", "kubeflow") == "yes"  # the rotator's cache of its own namespace
    assert can("list", "secrets", "-A") == "no"
    assert can("get", "secret/other", "-n", "default") == "no"
    assert can("watch", "secrets", "-n", "default") == "no"
    assert can("delete", own, "-n", "kubeflow") == "no"
    assert can("create", "pods", "-n", "default") == "yes"  # what it is for still works


def test_leader_election_takes_its_lease(cluster):
    from kubernetes import client

    leases = client.CoordinationV1Api(cluster.api()).list_namespaced_lease("kubeflow").items
    lease = next(x for x in leases if x.metadata.name == "1ca428e5.training-operator.kubeflow.org")
    assert lease.spec.holder_identity
    assert 'Successfully acquired lease" lock="kubeflow/1ca428e5.training-operator.kubeflow.org"' in cluster.operator_log()


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    values = folder / "values.yaml"
    cluster.cli("values", "--name", "e2e", "--workers", "2", "--cpu", "100m", "--memory", "128Mi",
                "--env", "GREETING=hello", "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1",
                "-o", str(values), check=True)
    proc = cluster.cli("submit", str(values), "-n", "default", check=True)
    assert proc.stdout == "pytorchjob e2e created\n"
    return values


def _pods(cluster, job):
    return _core(cluster).list_namespaced_pod("default", label_selector=f"training.kubeflow.org/job-name={job}").items


def test_the_operator_creates_pods_and_services_owned_by_the_job(cluster, submitted):
    from generator.container import programs
    from generator.kinds.pytorchjob import plan as v1_plan

    wait_for(lambda: len(_pods(cluster, "e2e")) >= 3, 60, "the operator to create the job's three pods")
    pods = {p.metadata.name: p for p in _pods(cluster, "e2e")}
    assert sorted(pods) == ["e2e-master-0", "e2e-worker-0", "e2e-worker-1"]
    services = {s.metadata.name: s for s in _core(cluster).list_namespaced_service("default").items}
    job = _custom(cluster).get_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", "e2e")
    for name in pods:
        assert name in services
        for obj in (pods[name], services[name]):
            (owner,) = obj.metadata.owner_references
            assert (owner.kind, owner.name, owner.uid, owner.controller) == ("PyTorchJob", "e2e", job["metadata"]["uid"], True)

    # The env the operator wrote against what `generator run` gives the same job.
    rendered = yaml.safe_load_all(cluster.cli("render", str(submitted), "--namespace", "default", check=True).stdout)
    manifest = next(d for d in rendered if d and d["kind"] == "PyTorchJob")
    plan = {r.name: r for r in v1_plan.plan(manifest, submitted.parent / "run", "default").replicas}
    for name, pod in pods.items():
        container = next(c for c in pod.spec.containers if c.name == "pytorch")
        operator_env = {e.name: e.value for e in container.env if e.value is not None}
        # The image's own ENV (PATH, PYTHONPATH, ...) is in the process's env on any node; the pod spec
        # never holds it, so it is left out of the comparison.
        image_env = programs.resolve(container.image).env()
        local_env = {k: v for k, v in plan[name.removeprefix("e2e-")].env.items() if k not in image_env or k in operator_env}
        differences = {k: (operator_env.get(k), local_env.get(k)) for k in set(operator_env) | set(local_env)
                       if operator_env.get(k) != local_env.get(k)}
        # Deliberate, and listed in the README: locally the Master is on loopback, on a free port,
        # not <job>-master-0:23456, and a pod without an output volume writes into the run folder.
        output = str(submitted.parent / "run" / "pods" / name.removeprefix("e2e-") / "output")
        assert differences == {"OUTPUT_DIR": (None, output),
                               "MASTER_ADDR": ("e2e-master-0", "127.0.0.1"),
                               "PET_MASTER_ADDR": ("e2e-master-0", "127.0.0.1"),
                               "MASTER_PORT": ("23456", local_env["MASTER_PORT"]),
                               "PET_MASTER_PORT": ("23456", local_env["PET_MASTER_PORT"])}, name
        assert operator_env["GREETING"] == "hello" and operator_env["WORLD_SIZE"] == "3"


def test_status_and_wait_show_what_the_api_server_knows(cluster, submitted):
    waited = cluster.cli("wait", "e2e", "-n", "default", "--for", "Succeeded", "--timeout", "300")
    assert waited.returncode == 0, waited.stderr
    status = json.loads(cluster.cli("status", "e2e", "-n", "default", "--format", "json", check=True).stdout)
    assert status["state"] == "Succeeded"
    assert [c["reason"] for c in status["conditions"]][0] == "PyTorchJobCreated"
    again = cluster.cli("submit", str(submitted), "-n", "default")
    assert again.returncode == 1
    assert "PyTorchJob e2e in namespace default already finished (Succeeded)" in again.stderr
    assert "pass --replace to delete it and submit anew" in again.stderr


def test_delete_takes_the_pods_through_garbage_collection(cluster, submitted):
    cluster.cli("delete", "e2e", "-n", "default", check=True)
    wait_for(lambda: not _pods(cluster, "e2e"), 90, "garbage collection to remove the job's pods")
    assert _pods(cluster, "e2e") == []
    missing = cluster.cli("status", "e2e", "-n", "default")
    assert missing.returncode == 1 and "PyTorchJob e2e not found in namespace default" in missing.stderr


def test_the_operator_was_never_denied_by_rbac(cluster):
    # The log is the operator's, and its controller got going.
    wait_for(lambda: "Starting workers" in cluster.operator_log(), 60, "the operator's controller to start its workers")
    log = cluster.operator_log()
    # How the API server words an RBAC refusal, wherever the operator logs one: `... is forbidden:
    # User "system:serviceaccount:..." cannot list resource ...`. Other refusals share "is forbidden"
    # (a pod for a namespace being deleted, as the tests sharing this cluster delete theirs).
    denials = [line for line in log.splitlines() if re.search(r'is forbidden: User "|cannot \w+ resource', line)]
    assert denials == []


@pytest.mark.parametrize("name", V2_SCENARIOS)
def test_every_v2_scenario_is_accepted_by_trainers_crds_and_webhooks(cluster, name):
    """Kubeflow Trainer v2.3.0 runs beside the operator: its CRDs (schemas and CEL rules) and its
    validating and defaulting webhooks judge the objects. Trainer's webhook reads a TrainJob's
    runtime, so the job's own TrainingRuntime is created for real (and removed), the TrainJob dry-run."""
    from kubernetes import client

    _ensure_namespace(cluster, scenarios.NAMESPACE)
    group, version = "trainer.kubeflow.org", "v1alpha1"
    plurals = {"TrainJob": "trainjobs", "TrainingRuntime": "trainingruntimes"}
    objects = [o for o in scenarios.render_objects("pytorchjob", name) if o["kind"] in plurals]
    assert "TrainJob" in {o["kind"] for o in objects}
    created = []
    try:
        for obj in sorted(objects, key=lambda o: o["kind"] == "TrainJob"):  # the runtime first
            args = (group, version, scenarios.NAMESPACE, plurals[obj["kind"]])
            if obj["kind"] == "TrainingRuntime":
                served = _custom(cluster).create_namespaced_custom_object(*args, obj)
                created.append((args, obj["metadata"]["name"]))
            else:
                served = _custom(cluster).create_namespaced_custom_object(*args, obj, dry_run="All")
            # Nothing pruned: every field the chart writes came back (the server adds its defaults).
            assert _missing(obj["spec"], served["spec"], "spec") == []
    finally:
        for args, obj_name in created:
            try:
                _custom(cluster).delete_namespaced_custom_object(*args, obj_name)
            except client.ApiException as exc:
                assert exc.status == 404


def _missing(wrote: object, served: object, path: str) -> list[str]:
    if isinstance(wrote, dict) and isinstance(served, dict):
        return [p for k, v in wrote.items() for p in _missing(v, served.get(k, "<pruned>"), f"{path}.{k}")]
    if isinstance(wrote, list) and isinstance(served, list) and len(wrote) == len(served):
        return [p for i, (a, b) in enumerate(zip(wrote, served, strict=True)) for p in _missing(a, b, f"{path}[{i}]")]
    return [] if str(wrote) == str(served) else [path]
