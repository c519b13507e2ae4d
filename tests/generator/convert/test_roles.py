"""Master and Worker folded into one node pod: equal settings fold, a volume one role alone has goes
to every node (a claim as a change to accept), anything else that differs is refused by path."""
import copy

from generator.convert import roles

IMAGE = "ghcr.io/pytorchjob-kit/trainer:0.1.0"


def job(master_pod: dict, worker_pod: dict | None = None) -> dict:
    specs = {"Master": {"replicas": 1, "template": {"spec": master_pod}},
             "Worker": {"replicas": 2, "template": {"spec": worker_pod or copy.deepcopy(master_pod)}}}
    return {"metadata": {"name": "j"}, "spec": {"pytorchReplicaSpecs": specs}}


def pod(mounts=(), volumes=(), **extra) -> dict:
    return {"containers": [{"name": "pytorch", "image": IMAGE, "volumeMounts": list(mounts)}], "volumes": list(volumes),
            **extra}


CLAIM = {"name": "out", "persistentVolumeClaim": {"claimName": "results"}}
SCRATCH = {"name": "scratch", "emptyDir": {}}


def test_equal_roles_fold_without_a_word():
    folded, changes, notes, problems = roles.fold(job(pod(nodeSelector={"pool": "a"})))
    assert (changes, notes, problems) == ([], [], [])
    specs = folded["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"] == specs["Worker"]["template"]


def test_a_claim_on_the_master_alone_goes_to_every_node_as_a_change():
    master = pod([{"name": "out", "mountPath": "/out"}], [CLAIM])
    worker = pod([{"name": "scratch", "mountPath": "/tmp/s"}], [SCRATCH])
    folded, changes, notes, problems = roles.fold(job(master, worker))
    assert problems == []
    (change,) = changes
    assert change.path == "spec.pytorchReplicaSpecs.Master.template.spec.volumes[out]"
    assert "claim results mounted at /out on the Master alone" == change.v1 and "on every node (3)" in change.v2
    assert "ReadWriteMany" in change.fix
    assert notes == ["volume scratch at /tmp/s, which the Worker alone had, is on every node now"]
    node = folded["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert [v["name"] for v in node["volumes"]] == ["out", "scratch"]
    assert [m["mountPath"] for m in node["containers"][0]["volumeMounts"]] == ["/out", "/tmp/s"]


def test_one_name_for_two_volumes_and_other_differences_are_refused_by_path():
    other = {"name": "out", "persistentVolumeClaim": {"claimName": "elsewhere"}}
    master = pod([{"name": "out", "mountPath": "/out"}], [CLAIM], tolerations=[{"key": "gpu", "operator": "Exists"}])
    worker = pod([{"name": "out", "mountPath": "/out"}], [other])
    worker["containers"].append({"name": "sidecar", "image": "busybox:1"})
    _, changes, _, problems = roles.fold(job(master, worker))
    assert changes == []
    assert [p.path for p in problems] == ["spec.pytorchReplicaSpecs.*.template.spec.tolerations",
                                          "spec.pytorchReplicaSpecs.*.template.spec.containers[sidecar]",
                                          "spec.pytorchReplicaSpecs.*.template.spec.volumes[out]"]
    assert all("one pod template" in p.hint for p in problems)


def test_restart_policies_left_unset_and_written_as_the_default_fold():
    j = job(pod())
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    assert roles.fold(j)[3] == []
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    assert [p.path for p in roles.fold(j)[3]] == ["spec.pytorchReplicaSpecs.*.restartPolicy"]
