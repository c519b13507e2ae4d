"""PyTorchJobs (and v1 values) converted to TrainJobs: every case the tests hold either converts to
objects Trainer v2.3 admits or is refused by path, with a report kept as a golden; what a file holds
besides its jobs. Each change in meaning on its own: test_meaning.py."""
import pytest
import yaml

from generator.convert import jobs
from generator.convert.report import CHANGES, REFUSED, SAME
from generator.kinds.trainjob import runtime
from tests.support import MANIFESTS, conversions, kube, our_manifests, upstream_examples
from tests.support.conversions import job, paths

# What each case comes to, and (for a refusal) the path that says why.
OUTCOMES = {
    "digits-ddp": CHANGES, "elastic-workers": CHANGES, "tencent-nccl": CHANGES,
    "per-role-differences": (REFUSED, "spec.pytorchReplicaSpecs.*.template.spec.nodeSelector"),
    "vsphere-cpu": (REFUSED, "spec.pytorchReplicaSpecs.*.template.spec.containers[pytorch].command"),
    "vsphere-gpu": (REFUSED, "spec.pytorchReplicaSpecs.*.template.spec.containers[pytorch].command"),
    "upstream-cpu-demo_demo": CHANGES, "upstream-elastic_echo_echo": CHANGES,
    "upstream-elastic_imagenet_imagenet": CHANGES, "upstream-simple": CHANGES,
    "upstream-mnist_v1_pytorch_job_mnist_gloo": (REFUSED, "spec.pytorchReplicaSpecs.*.template.spec.containers[pytorch].command"),
    "upstream-mnist_v1_pytorch_job_mnist_nccl": (REFUSED, "spec.pytorchReplicaSpecs.*.template.spec.containers[pytorch].command"),
}
@pytest.mark.parametrize("manifest", our_manifests() + upstream_examples())
def test_each_case_converts_or_is_refused_by_path_as_stated(manifest):
    (done,) = conversions.converted(manifest)
    expected = OUTCOMES[conversions.case_id(manifest)]
    outcome, path = expected if isinstance(expected, tuple) else (expected, None)
    assert done.outcome == outcome, done.problems
    if outcome == REFUSED:
        assert path in [p.path for p in done.problems] and done.objects == []
        return
    assert runtime.check(done.objects) == []  # what `validate --target v2` checks
    assert [o["kind"] for o in done.objects][-1] == "TrainJob"  # the runtime, if any, before the job that needs it
    assert done.command[0] == "torchrun" and runtime.resolve(done.objects).pod["spec"]["containers"][0]["command"] == \
        done.command[:len(runtime.resolve(done.objects).pod["spec"]["containers"][0]["command"])]


@pytest.mark.parametrize("manifest", our_manifests() + upstream_examples())
def test_each_conversion_passes_trainers_crd_schemas(manifest):
    if kube.trainer_crd("TrainJob") is None:
        pytest.skip("../shared/reference/trainer-v2.3.0 is absent: Trainer's CRDs come from ../shared")
    (done,) = conversions.converted(manifest)
    assert [p for o in done.objects for p in kube.problems(o)] == []


@pytest.mark.parametrize("manifest", our_manifests() + upstream_examples())
def test_each_cases_report_matches_its_golden(manifest):
    golden = conversions.golden_path(manifest)
    assert golden.exists(), f"no golden for {manifest.name}: run `make golden` and review it"
    assert conversions.text(manifest) == golden.read_text(), \
        f"convert reports {manifest.name} differently from {golden.name}: run `make golden` and review the diff"


def test_no_stale_goldens():
    on_disk = sorted(p.name for p in conversions.FOLDER.glob("*.txt"))
    ours = sorted(conversions.golden_path(p).name for p in MANIFESTS.glob("*.yaml"))
    assert [n for n in on_disk if not n.startswith("upstream-")] == ours


def test_several_jobs_in_one_file_each_convert(tmp_path):
    second = job()
    second["metadata"]["name"] = "u"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([job(), second]))
    assert [c.name for c in jobs.convert_file(str(path), "release", None)] == ["t", "u"]


def test_a_trainjob_or_v2_values_are_refused_as_already_converted(tmp_path):
    done = conversions.converted(MANIFESTS / "tencent-nccl.yaml")[0]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all(done.objects))
    (refused,) = jobs.convert_file(str(path), "release", None)
    assert refused.outcome == REFUSED and "is already a TrainJob" in refused.problems[0].message
    path.write_text("target: v2\n")
    (refused,) = jobs.convert_file(str(path), "release", None)
    assert refused.problems[0].path == "target"


def test_values_convert_with_their_keys_named(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text("job: {name: vals}\ntopology: {workers: 1}\nrestartPolicy: ExitCode\nargs: [--dataset, digits]\n")
    (done,) = jobs.convert_file(str(path), "release", None)
    assert done.name == "vals" and done.outcome == CHANGES
    assert "restartPolicy" in paths(done)
    assert done.command[:3] == ["torchrun", "--module", "trainer"]
    path.write_text("job: {name: vals}\ntopology: {workers: 1}\nmaster: {resources: {requests: {cpu: '2'}}}\n")
    (refused,) = jobs.convert_file(str(path), "release", None)
    assert refused.outcome == REFUSED and [p.path for p in refused.problems] == ["master.resources"]


def test_what_a_file_holds_beside_its_jobs_and_the_claim_values_make_are_written_first(tmp_path):
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}
    path = tmp_path / "with-claim.yaml"
    path.write_text(yaml.safe_dump_all([claim, job()]))
    (done,) = jobs.convert_file(str(path), "release", None)
    assert [o["kind"] for o in done.objects] == ["PersistentVolumeClaim", "TrainingRuntime", "TrainJob"]
    assert done.objects[0] == claim and "kept as they are: PersistentVolumeClaim data" in done.notes
    path.write_text("job: {name: vals}\ntopology: {workers: 1}\noutput: {enabled: true}\n")
    (done,) = jobs.convert_file(str(path), "release", None)
    assert [(o["kind"], o["metadata"]["name"]) for o in done.objects][0] == ("PersistentVolumeClaim", "vals-output")
    assert "output.mountOn" in paths(done)  # the Master alone mounted it: the values key that said so


def convert_beside(tmp_path, *others) -> object:
    """The file's one conversion, with `others` as the documents before the job."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([*others, job()]))
    (done,) = jobs.convert_file(str(path), "release", None)
    return done


def test_rbac_and_cluster_scoped_objects_beside_the_job_are_refused_by_their_place(tmp_path):
    admin = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "all"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
             "subjects": [{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}]}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    done = convert_beside(tmp_path, admin, role, namespace)
    assert done.outcome == REFUSED and done.objects == []
    assert [(p.path, p.message) for p in done.problems] == [
        ("documents[0]", "is a ClusterRoleBinding all, which grants permissions; convert carries only the job's "
                         "namespaced objects"),
        ("documents[1]", "is a Role r, which grants permissions; convert carries only the job's namespaced objects"),
        ("documents[2]", "is a Namespace team, which is not namespaced: it acts on the whole cluster; convert carries "
                         "only the job's namespaced objects")]
    assert {p.hint for p in done.problems} == {"apply it on its own after review, or remove it from the file"}


def test_an_object_beside_the_job_keeps_its_namespace(tmp_path):
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team"},
              "data": {"lr": "0.1"}}
    done = convert_beside(tmp_path, config)
    assert done.outcome == SAME and done.objects[0] == config


@pytest.mark.parametrize(("document", "path", "message"), [
    ({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}}, "documents[0].metadata.name", "is required"),
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dat": {"a": "1"}}, "documents[0]",
     "Additional properties are not allowed ('dat' was unexpected)"),
    (["a", "list"], "documents[0]", "is a YAML list, not a Kubernetes object, and cannot be carried beside the TrainJob"),
    ("just text", "documents[0]", "is a YAML str, not a Kubernetes object, and cannot be carried beside the TrainJob"),
], ids=["no metadata", "unknown field", "a list", "a string"])
def test_a_document_beside_the_job_that_is_no_valid_object_is_refused_by_its_place(tmp_path, document, path, message):
    done = convert_beside(tmp_path, document)
    assert done.outcome == REFUSED and [(p.path, p.message) for p in done.problems] == [(path, message)]


def test_an_object_of_a_kind_this_tool_does_not_know_is_a_change_to_review(tmp_path):
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "team"},
             "spec": {"clusterQueue": "cq"}}
    done = convert_beside(tmp_path, queue)
    assert done.outcome == CHANGES and paths(done) == ["documents[0]"] and done.objects[0] == queue
    assert done.changes[0].fix == "review it before applying the TrainJob's file, or remove it and apply it on its own"
