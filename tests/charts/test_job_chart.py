"""What charts/pytorchjob renders for the values a user sets."""
import pytest

from generator import helm, paths
from generator.errors import UserError


def render(values=None, release="demo"):
    objects = helm.render_objects(paths.JOB_CHART, values or {}, release, "ml")
    jobs = [o for o in objects if o["kind"] == "PyTorchJob"]
    assert len(jobs) == 1
    return jobs[0], [o for o in objects if o["kind"] != "PyTorchJob"]


def container(job, role="Master"):
    return job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def pod(job, role="Master"):
    return job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]


def test_defaults_are_a_cpu_gloo_job_with_master_and_two_workers():
    job, others = render()
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert job["metadata"]["name"] == "demo-pytorchjob"
    assert job["metadata"]["namespace"] == "ml"
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    for role in ("Master", "Worker"):
        c = container(job, role)
        assert c["name"] == "pytorch"
        assert c["image"] == "ghcr.io/pytorchjob-kit/trainer:0.1.0"
        assert c["args"][:2] == ["--backend", "gloo"]
        assert "command" not in c  # the image's entrypoint: python -m trainer
        assert c["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        p = pod(job, role)
        assert p["automountServiceAccountToken"] is False
        assert p["securityContext"]["runAsNonRoot"] is True
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in p["volumes"]
        assert specs[role]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        assert "tolerations" not in p
    assert others == []
    assert "elasticPolicy" not in job["spec"] and "nprocPerNode" not in job["spec"]
    # The operator's defaults, written so that clients reading the job back get a whole runPolicy.
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}


def test_standard_labels_on_job_and_pods():
    job, _ = render()
    for labels in (job["metadata"]["labels"], job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]):
        assert labels["app.kubernetes.io/name"] == "pytorchjob"
        assert labels["app.kubernetes.io/instance"] == "demo"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "pytorchjob-0.1.0"


def test_gpus_choose_nccl_add_limit_and_toleration():
    job, _ = render({"resources": {"gpus": 2}, "tolerations": [
        {"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"}]})
    c = container(job)
    assert c["args"][:2] == ["--backend", "nccl"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    tolerations = pod(job)["tolerations"]
    assert {"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"} in tolerations
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_gpu_resource_name_and_toleration_switch():
    job, _ = render({"resources": {"gpus": 1}, "gpuResourceName": "amd.com/gpu", "gpuToleration": False})
    assert container(job)["resources"]["limits"]["amd.com/gpu"] == 1
    assert "tolerations" not in pod(job)


def test_backend_auto_stays_gloo_when_only_some_roles_have_gpus():
    job, _ = render({"worker": {"resources": {"gpus": 1}}})
    assert container(job, "Worker")["args"][:2] == ["--backend", "gloo"]
    assert "nvidia.com/gpu" not in container(job, "Master")["resources"].get("limits", {})


def test_backend_none_passes_no_backend_argument():
    job, _ = render({"topology": {"backend": "none"}, "args": ["--epochs", "3"]})
    assert container(job)["args"] == ["--epochs", "3"]


def test_master_only_job():
    job, _ = render({"topology": {"workers": 0}})
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_nproc_per_node_starts_through_torchrun_and_is_a_string():
    job, _ = render({"topology": {"nprocPerNode": 4}})
    assert job["spec"]["nprocPerNode"] == "4"
    assert container(job)["command"] == ["torchrun", "--module", "trainer"]
    job, _ = render({"topology": {"nprocPerNode": "4"}, "launcher": "entrypoint"})
    assert "command" not in container(job)
    job, _ = render({"topology": {"nprocPerNode": "4"}, "command": ["python", "train.py"]})
    assert container(job)["command"] == ["python", "train.py"]


def test_elastic_worker_only_job_never_emits_deprecated_field():
    job, _ = render({"topology": {"master": False, "workers": 2, "nprocPerNode": "2"},
                     "elasticPolicy": {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "rdzvId": "42",
                                       "rdzvPort": 29400, "maxRestarts": 5}})
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    elastic = job["spec"]["elasticPolicy"]
    assert elastic == {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d", "rdzvPort": 29400,
                       "rdzvId": "42", "maxRestarts": 5}
    assert "nProcPerNode" not in elastic and job["spec"]["nprocPerNode"] == "2"


def test_image_digest_pull_policy_and_secrets():
    job, _ = render({"image": {"repository": "registry.example.com:5000/team/train", "tag": "v2",
                               "digest": "sha256:" + "a" * 64, "pullPolicy": "Always", "pullSecrets": ["regcred"]}})
    assert container(job)["image"] == "registry.example.com:5000/team/train@sha256:" + "a" * 64
    assert container(job)["imagePullPolicy"] == "Always"
    assert pod(job)["imagePullSecrets"] == [{"name": "regcred"}]
    job, _ = render({"image": {"tag": "v2"}})
    assert container(job)["image"] == "ghcr.io/pytorchjob-kit/trainer:v2"


def test_created_output_pvc_is_kept_and_mounted_on_master_only():
    job, others = render({"output": {"enabled": True, "size": "5Gi", "storageClassName": "fast"}})
    (pvc,) = others
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == "demo-pytorchjob-output"
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                           "resources": {"requests": {"storage": "5Gi"}}}
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert {"name": "output", "mountPath": "/opt/pytorch/output"} in container(job)["volumeMounts"]
    assert {"name": "OUTPUT_DIR", "value": "/opt/pytorch/output"} in container(job)["env"]
    assert {"name": "output", "persistentVolumeClaim": {"claimName": "demo-pytorchjob-output"}} in pod(job)["volumes"]
    assert all(m["name"] != "output" for m in container(job, "Worker")["volumeMounts"])


def test_existing_claim_on_every_pod():
    job, others = render({"output": {"enabled": True, "existingClaim": "shared", "mountOn": "all", "mountPath": "/out"}})
    assert others == []
    for role in ("Master", "Worker"):
        assert {"name": "output", "mountPath": "/out"} in container(job, role)["volumeMounts"]
        assert {"name": "output", "persistentVolumeClaim": {"claimName": "shared"}} in pod(job, role)["volumes"]


def test_per_role_overrides_merge_over_shared_values():
    job, _ = render({
        "nodeSelector": {"pool": "train"}, "env": [{"name": "A", "value": "shared"}, {"name": "B", "value": "b"}],
        "master": {"restartPolicy": "ExitCode", "nodeSelector": {"zone": "a"}, "env": [{"name": "A", "value": "master"}],
                   "resources": {"requests": {"cpu": "500m"}}, "labels": {"tier": "control"},
                   "annotations": {"note": "rank0"}},
        "worker": {"restartPolicy": "Never", "resources": {"gpus": 1}}})
    master, worker = job["spec"]["pytorchReplicaSpecs"]["Master"], job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert master["restartPolicy"] == "ExitCode" and worker["restartPolicy"] == "Never"
    assert pod(job)["nodeSelector"] == {"pool": "train", "zone": "a"}
    assert pod(job, "Worker")["nodeSelector"] == {"pool": "train"}
    assert container(job)["env"] == [{"name": "B", "value": "b"}, {"name": "A", "value": "master"}]
    assert container(job, "Worker")["env"] == [{"name": "A", "value": "shared"}, {"name": "B", "value": "b"}]
    assert container(job)["resources"]["requests"] == {"cpu": "500m", "memory": "2Gi"}
    assert container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert master["template"]["metadata"]["labels"]["tier"] == "control"
    assert master["template"]["metadata"]["annotations"]["note"] == "rank0"


def test_role_gpus_zero_overrides_shared_gpus():
    job, _ = render({"resources": {"gpus": 2}, "master": {"resources": {"gpus": 0}}})
    assert "nvidia.com/gpu" not in container(job)["resources"].get("limits", {})
    assert container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == 2


def test_env_sources_and_env_from():
    env = [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
           {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    env_from = [{"secretRef": {"name": "creds"}}, {"configMapRef": {"name": "cfg"}, "prefix": "X_"}]
    job, _ = render({"env": env, "envFrom": env_from})
    assert container(job)["env"] == env and container(job)["envFrom"] == env_from


def test_run_policy_and_kueue_label():
    job, _ = render({"kueue": {"queueName": "team-a"}, "runPolicy": {
        "cleanPodPolicy": "All", "ttlSecondsAfterFinished": 0, "activeDeadlineSeconds": 60, "backoffLimit": 2,
        "suspend": True, "schedulingPolicy": {"queue": "q", "priorityClass": "high", "minAvailable": 2}}})
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 0,
                                        "activeDeadlineSeconds": 60, "backoffLimit": 2, "suspend": True,
                                        "schedulingPolicy": {"queue": "q", "priorityClass": "high", "minAvailable": 2}}


def test_run_policy_states_only_the_operators_defaults():
    """Unset values get the operator's defaults (cleanPodPolicy None, suspend false); a value the
    operator has no default for stays out rather than being invented."""
    job, _ = render({"runPolicy": {"backoffLimit": 3, "suspend": None}})
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False, "backoffLimit": 3}
    job, _ = render({"runPolicy": {"cleanPodPolicy": "Running"}})
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": False}


def test_pod_level_settings_and_passthrough():
    job, _ = render({"serviceAccountName": "trainer", "automountServiceAccountToken": True,
                     "priorityClassName": "high", "affinity": {"nodeAffinity": {}}, "port": None,
                     "podSpecExtra": {"hostIPC": True, "dnsPolicy": "ClusterFirstWithHostNet"},
                     "containerExtra": {"workingDir": "/work"}, "master": {"podSpecExtra": {"hostIPC": False}},
                     "podSecurityContext": None, "securityContext": None, "shm": {"enabled": False},
                     "disableIstioSidecar": False,
                     "extraVolumes": [{"name": "data", "emptyDir": {}}],
                     "extraVolumeMounts": [{"name": "data", "mountPath": "/data"}]})
    p, c = pod(job), container(job)
    assert p["serviceAccountName"] == "trainer" and p["automountServiceAccountToken"] is True
    assert p["priorityClassName"] == "high"
    assert p["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert p["hostIPC"] is False and pod(job, "Worker")["hostIPC"] is True
    assert c["workingDir"] == "/work" and "ports" not in c
    assert "securityContext" not in p and "securityContext" not in c
    assert p["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert c["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert "annotations" not in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]


def test_notes_tell_how_to_watch_and_read_logs():
    import helm_python
    with helm_python.Chart.load(str(paths.JOB_CHART)) as chart:
        notes = chart.render({}, name="demo", namespace="ml")["pytorchjob/templates/NOTES.txt"]
    assert "kubectl -n ml get pytorchjob demo-pytorchjob -w" in notes
    assert "kubectl -n ml logs -f demo-pytorchjob-master-0" in notes
    assert "kubectl -n ml logs -f demo-pytorchjob-worker-0" in notes


@pytest.mark.parametrize("values, message", [
    ({"job": {"name": "a" * 55}}, "job.name"),
    ({"fullnameOverride": "1st-run"}, "is not a DNS-1035 label"),
    ({"elasticPolicy": {"enabled": True}, "topology": {"workers": 0}}, "elasticPolicy.enabled"),
    ({"elasticPolicy": {"enabled": True, "minReplicas": 3, "maxReplicas": 2}}, "elasticPolicy.minReplicas"),
])
def test_template_checks_refuse_what_the_schema_cannot(values, message):
    with pytest.raises(UserError) as err:
        render(values)
    assert message in str(err.value)


def test_gpu_pods_get_the_cuda_build_unless_a_tag_or_digest_is_given():
    def images(values):
        job, _ = render(values)
        return {role: spec["template"]["spec"]["containers"][0]["image"]
                for role, spec in job["spec"]["pytorchReplicaSpecs"].items()}

    assert set(images({}).values()) == {"ghcr.io/pytorchjob-kit/trainer:0.1.0"}
    assert set(images({"resources": {"gpus": 1}}).values()) == {"ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda"}
    # One image for every pod: GPU Workers make it the CUDA build for a CPU Master too.
    assert set(images({"worker": {"resources": {"gpus": 2}}}).values()) == {"ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda"}
    assert set(images({"resources": {"gpus": 1}, "image": {"tag": "0.1.0"}}).values()) == {
        "ghcr.io/pytorchjob-kit/trainer:0.1.0"}
    digest = "sha256:" + "a" * 64
    assert set(images({"resources": {"gpus": 1}, "image": {"digest": digest}}).values()) == {
        f"ghcr.io/pytorchjob-kit/trainer@{digest}"}
