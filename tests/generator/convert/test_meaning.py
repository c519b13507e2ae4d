"""Each change in meaning a conversion states (convert/meaning.py), from the operator's contract on
the v1 side and the resolved TrainJob on the v2 side, on jobs made to show one change at a time."""
import pytest

from generator.convert import jobs
from generator.convert.report import REFUSED, SAME
from generator.kinds.trainjob import runtime
from tests.support.conversions import job, main, paths, with_workers


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
