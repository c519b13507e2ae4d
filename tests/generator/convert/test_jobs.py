"""PyTorchJobs (and v1 values) converted to TrainJobs: every case the tests hold either converts to
objects Trainer v2.3 admits or is refused by path, with a report kept as a golden; each change in
meaning appears where the job has it, and only there."""
import copy

import pytest
import yaml

from generator.convert import jobs
from generator.convert.report import CHANGES, REFUSED, SAME
from generator.kinds.trainjob import runtime
from tests.support import MANIFESTS, conversions, kube, our_manifests, upstream_examples

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
IMAGE = "ghcr.io/pytorchjob-kit/trainer:0.1.0"


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


def job(**spec_over) -> dict:
    """A Master-only PyTorchJob of the trainer that converts without a change in meaning."""
    container = {"name": "pytorch", "image": IMAGE, "command": ["torchrun", "--module", "trainer"],
                 "args": ["--dataset", "digits"], "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}]}
    spec = {"nprocPerNode": "1", "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
        "spec": {"containers": [container]}}}}}
    spec.update(spec_over)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "t"}, "spec": spec}


def with_workers(j: dict, n: int = 1) -> dict:
    j["spec"]["pytorchReplicaSpecs"]["Worker"] = {**copy.deepcopy(j["spec"]["pytorchReplicaSpecs"]["Master"]), "replicas": n}
    return j


def main(j: dict, role: str = "Master") -> dict:
    return j["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def paths(done) -> list[str]:
    return [c.path for c in done.changes]


def test_a_job_v2_runs_alike_converts_without_a_change():
    done = jobs.convert_job(job(), "t.yaml")
    assert done.outcome == SAME and done.changes == [] and done.notes == []
    own, trainjob = done.objects  # Never needs a runtime of its own: upstream's restarts failed nodes
    assert trainjob["spec"]["runtimeRef"] == {"apiGroup": runtime.GROUP, "kind": "TrainingRuntime", "name": "t"}
    resolved = runtime.resolve(done.objects)
    assert (resolved.pod["spec"]["restartPolicy"], resolved.node_backoff_limit, resolved.max_set_restarts) == ("Never", 0, 0)
    assert trainjob["spec"]["trainer"]["numProcPerNode"] == 1 and "namespace" not in trainjob["metadata"]
    assert not any(k.startswith(("helm.sh", "app.kubernetes.io")) for k in trainjob["metadata"].get("labels") or {})


def test_workers_alone_were_already_done_when_every_one_succeeded():
    j = job()
    j["spec"]["pytorchReplicaSpecs"] = {"Worker": {**j["spec"]["pytorchReplicaSpecs"]["Master"], "replicas": 3}}
    done = jobs.convert_job(j, "t.yaml")
    assert done.outcome == SAME, done.changes
    assert runtime.resolve(done.objects).nodes == 3


def test_a_master_with_workers_changes_what_success_means():
    done = jobs.convert_job(with_workers(job()), "t.yaml")
    (change,) = done.changes
    assert change.path == "spec.pytorchReplicaSpecs.Master" and "every one of its 2 nodes" in change.v2


@pytest.mark.parametrize("policy, limit, retried", [
    ("ExitCode", 3, "a pod that exited 128-255 restarted alone"),
    ("OnFailure", None, "no limit on restarts"),
    ("Always", 2, "and so did one that succeeded"),
])
def test_restarts_are_told_from_the_operators_rule_and_the_resolved_trainjob(policy, limit, retried):
    j = job(runPolicy={"backoffLimit": limit} if limit is not None else {})
    j["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = policy
    done = jobs.convert_job(j, "t.yaml")
    (change,) = [c for c in done.changes if c.path.endswith("restartPolicy")]
    assert retried in change.v1
    resolved = runtime.resolve(done.objects)
    if limit:
        assert resolved.max_set_restarts == limit and resolved.node_backoff_limit == 0
        assert f"up to {limit} time(s) (JobSet failurePolicy.maxRestarts)" in change.v2
    else:
        assert f"up to {resolved.node_backoff_limit} time(s) (the node Job's backoffLimit)" in change.v2
    assert resolved.pod["spec"]["restartPolicy"] == "OnFailure"


@pytest.mark.parametrize("policy", ["OnFailure", "ExitCode"])
def test_a_backoff_limit_of_zero_restarted_nothing_and_restarts_nothing_so_nothing_changes(policy):
    """The operator fails the job at the first restart its backoffLimit 0 would count, whatever the
    policy would retry: the TrainJob, which restarts nothing either, runs alike."""
    j = job(runPolicy={"backoffLimit": 0})
    j["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = policy
    done = jobs.convert_job(j, "t.yaml")
    assert (done.outcome, done.changes, done.notes) == (SAME, [], [])
    resolved = runtime.resolve(done.objects)
    assert (resolved.node_backoff_limit, resolved.max_set_restarts) == (0, 0)


def test_never_with_a_limit_it_ignored_stays_never_with_none():
    done = jobs.convert_job(job(runPolicy={"backoffLimit": 4}), "t.yaml")
    assert done.outcome == SAME
    resolved = runtime.resolve(done.objects)
    assert (resolved.node_backoff_limit, resolved.max_set_restarts) == (0, 0)
    assert any("backoffLimit 4 never applied under restartPolicy Never" in n for n in done.notes)


@pytest.mark.parametrize("command, v2, change", [
    (["python", "train.py"], ["torchrun", "train.py"], True),
    (["python3", "-m", "pkg.train"], ["torchrun", "--module", "pkg.train"], True),
    (["python", "-u", "train.py"], ["torchrun", "--no-python", "python", "-u", "train.py"], True),
    (["/bin/sh", "-c", "train"], ["torchrun", "--no-python", "/bin/sh", "-c", "train"], True),
    (["python", "-m", "torch.distributed.run", "train.py"], ["torchrun", "train.py"], False),
    (["/usr/local/bin/torchrun", "train.py"], ["torchrun", "train.py"], False),
])
def test_the_command_starts_through_torchrun_and_says_so_where_the_launch_changes(command, v2, change):
    j = job()
    main(j)["command"] = command
    done = jobs.convert_job(j, "t.yaml")
    assert done.command == [*v2, "--dataset", "digits"]
    launch = [c for c in done.changes if c.path.endswith("command")]
    assert bool(launch) == change
    if change:
        assert "WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT set by the operator" in launch[0].v1
        assert "PET_NNODES" in launch[0].v2 and "LOCAL_RANK" in launch[0].v2


def test_the_trainers_own_entrypoint_is_known_and_any_other_is_refused():
    j = job()
    main(j).pop("command")
    assert jobs.convert_job(j, "t.yaml").command[:3] == ["torchrun", "--module", "trainer"]
    main(j)["image"] = "registry.example.com/other:1"
    done = jobs.convert_job(j, "t.yaml")
    assert done.outcome == REFUSED and "image's own ENTRYPOINT" in done.problems[0].message


@pytest.mark.parametrize("mutate, path", [
    (lambda j: main(j).update(command=["python", "-m", "torch.distributed.launch", "x.py"]),
     "spec.pytorchReplicaSpecs.*.template.spec.containers[pytorch].command"),
    (lambda j: (main(j).update(command=["python", "x.py"]), j["spec"].update(nprocPerNode="4")), "spec.nprocPerNode"),
    (lambda j: main(j)["env"].append({"name": "PET_NNODES", "value": "3"}), "spec.trainer.env[1].name"),
], ids=["torch.distributed.launch", "nproc without torchrun", "a variable Trainer sets"])
def test_what_cannot_run_alike_is_refused_by_path(mutate, path):
    j = job()
    mutate(j)
    done = jobs.convert_job(j, "t.yaml")
    assert done.outcome == REFUSED and path in [p.path for p in done.problems]


@pytest.mark.parametrize("nproc, gpus, change", [("auto", 0, True), ("cpu", 0, True), ("auto", 1, False), ("gpu", 1, False)])
def test_nproc_per_node_changes_only_where_trainers_auto_counts_differently(nproc, gpus, change):
    j = job(nprocPerNode=nproc)
    if gpus:
        main(j)["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    done = jobs.convert_job(j, "t.yaml")
    assert ("spec.nprocPerNode" in paths(done)) == change
    assert "numProcPerNode" not in done.objects[-1]["spec"]["trainer"]


def test_scheduling_and_cleanup_have_no_counterpart_and_say_so():
    j = job(runPolicy={"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60,
                       "schedulingPolicy": {"minAvailable": 1, "queue": "q"}})
    j["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    done = jobs.convert_job(j, "t.yaml")
    assert paths(done) == ["metadata.labels[kueue.x-k8s.io/queue-name]", "spec.runPolicy.schedulingPolicy",
                           "spec.runPolicy.cleanPodPolicy", "spec.runPolicy.ttlSecondsAfterFinished"]
    kueue = done.changes[0]
    assert "kubeflow.org/pytorchjob" in kueue.v1 and "trainer.kubeflow.org/trainjob" in kueue.v2
    trainjob = done.objects[-1]
    assert trainjob["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team"}
    assert done.objects[0]["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] == 60


def test_the_operators_default_clean_pod_policy_is_no_change():
    assert jobs.convert_job(job(runPolicy={"cleanPodPolicy": "None", "suspend": False}), "t.yaml").outcome == SAME


def test_elastic_jobs_become_a_fixed_number_of_nodes():
    j = job(elasticPolicy={"minReplicas": 1, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 3})
    j["spec"]["pytorchReplicaSpecs"] = {"Worker": {**j["spec"]["pytorchReplicaSpecs"]["Master"], "replicas": 2}}
    done = jobs.convert_job(j, "t.yaml")
    success, change = done.changes
    assert "its first Worker succeeded (elastic)" in success.v1 and "every one of its 2 nodes" in success.v2
    assert change.path == "spec.elasticPolicy" and "between 1 and 4 Workers" in change.v1 and "up to 3" in change.v1
    assert "a fixed 2 node(s)" in change.v2 and runtime.resolve(done.objects).nodes == 2
    # torchrun's elastic settings went with the policy, rather than into the trainer's env
    assert not [e for e in done.objects[-1]["spec"]["trainer"]["env"] if e["name"].startswith("PET_")]


def test_extra_ports_and_v1_pod_names_are_told():
    j = job()
    main(j)["ports"] = [{"name": "metrics", "containerPort": 9090}]
    main(j)["args"] = ["--peer", "t-master-0:23456"]
    done = jobs.convert_job(j, "t.yaml")
    assert "the training container declared ports metrics" in done.changes[0].v1
    assert "$(PET_MASTER_ADDR)" in done.changes[1].fix and "t-node-0-0.t" in done.changes[1].v2


def test_pythonunbuffered_that_the_operator_set_is_kept():
    j = job()
    main(j).pop("env")
    done = jobs.convert_job(j, "t.yaml")
    assert {"name": "PYTHONUNBUFFERED", "value": "1"} in done.objects[-1]["spec"]["trainer"]["env"]
    assert done.outcome == SAME and "PYTHONUNBUFFERED=1" in done.notes[0]


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
