"""`python -m generator import`: manifests to values that render the same PyTorchJob."""

import copy

import pytest
import yaml

from generator.images import distribution
from generator.kinds.pytorchjob import importer
from tests.support import MANIFESTS, our_manifests, trainjobs, upstream_examples
from tests.support.cli_helpers import run

OURS = sorted(MANIFESTS.glob("*.yaml"))


@pytest.mark.parametrize("manifest", our_manifests() + upstream_examples())
def test_import_then_render_gives_back_the_same_pytorchjob(manifest, tmp_path, monkeypatch):
    # Offline, a command left to the image stays empty, so the render is the original as written
    # (where a registry gives the image's config, import writes the command out: e2e/test_images.py).
    monkeypatch.setenv(distribution.OFFLINE_ENV, "1")
    original = yaml.safe_load(manifest.read_text())
    values_file = tmp_path / "values.yaml"
    code, _, err = run("import", str(manifest), "-o", str(values_file))
    assert code == 0, err
    code, rendered, err = run("render", str(values_file), "--namespace", original["metadata"].get("namespace", "default"))
    assert code == 0, err
    (job,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PyTorchJob"]
    assert importer.compare(original, job) == []
    # and the comparison is not vacuous
    assert job["metadata"]["name"] == original["metadata"]["name"]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == set(original["spec"]["pytorchReplicaSpecs"])


def test_run_policy_the_chart_states_imports_back_as_unset(tmp_path):
    """A job as the chart renders it (runPolicy with the operator's defaults) and one without any
    runPolicy both import to values that leave runPolicy alone; a non-default value is kept."""
    base = yaml.safe_load((MANIFESTS / "vsphere-gpu.yaml").read_text())
    base["spec"].pop("runPolicy", None)
    stated, chosen = copy.deepcopy(base), copy.deepcopy(base)
    stated["spec"]["runPolicy"] = {"cleanPodPolicy": "None", "suspend": False}
    chosen["spec"]["runPolicy"] = {"cleanPodPolicy": "Running", "suspend": False}
    imported = {}
    for name, job in (("absent", base), ("stated", stated), ("chosen", chosen)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(job))
        code, out, err = run("import", str(path))
        assert code == 0, err
        imported[name] = yaml.safe_load(out)
    assert "runPolicy" not in imported["absent"] and "runPolicy" not in imported["stated"]
    assert imported["absent"] == imported["stated"]
    assert imported["chosen"]["runPolicy"] == {"cleanPodPolicy": "Running"}


def test_compare_notices_differences():
    original = yaml.safe_load(OURS[0].read_text())
    changed = yaml.safe_load(OURS[0].read_text())
    next(iter(changed["spec"]["pytorchReplicaSpecs"].values()))["template"]["spec"]["containers"][0]["image"] = "x:1"
    assert importer.compare(original, changed)


def test_defaults_the_original_lacked_are_switched_off(tmp_path):
    manifest = MANIFESTS / "vsphere-gpu.yaml"
    code, out, _ = run("import", str(manifest))
    values = yaml.safe_load(out)
    assert values["shm"] == {"enabled": False} and values["gpuToleration"] is False
    assert values["disableIstioSidecar"] is False
    path = tmp_path / "v.yaml"
    path.write_text(out)
    job = next(d for d in yaml.safe_load_all(run("render", str(path))[1]) if d)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert "sidecar.istio.io/inject" not in (worker["metadata"].get("annotations") or {})
    assert worker["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert [v["name"] for v in worker["spec"]["volumes"]] == ["dshm"]  # the original's own, not the chart's


def test_per_role_differences_and_sidecars_are_kept(tmp_path):
    code, out, _ = run("import", str(MANIFESTS / "per-role-differences.yaml"))
    values = yaml.safe_load(out)
    assert values["master"]["restartPolicy"] == "ExitCode" and values["worker"]["restartPolicy"] == "OnFailure"
    assert values["kueue"] == {"queueName": "team-vision"}
    assert values["worker"]["extraContainers"] == [{"name": "log-shipper", "image": "fluent/fluent-bit:3.1"}]
    assert values["master"]["podSpecExtra"]["initContainers"][0]["name"] == "fetch"
    assert values["containerExtra"] == {"workingDir": "/workspace"} and values["port"] == 29500


def test_notes_go_to_stderr():
    code, out, err = run("import", str(MANIFESTS / "tencent-nccl.yaml"))
    assert code == 0 and "note: namespace ai-training is not part of the values" in err and "note" not in out


def test_deprecated_nproc_field_moves_to_spec(tmp_path):
    job = yaml.safe_load((MANIFESTS / "elastic-workers.yaml").read_text())
    job["spec"].pop("nprocPerNode")
    job["spec"]["elasticPolicy"]["nProcPerNode"] = 2
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(job))
    code, out, err = run("import", str(path))
    assert code == 0 and yaml.safe_load(out)["topology"]["nprocPerNode"] == "2"
    assert "moved the deprecated elasticPolicy.nProcPerNode" in err


def _mutated(mutate):
    job = yaml.safe_load((MANIFESTS / "vsphere-cpu.yaml").read_text())
    mutate(job)
    return yaml.safe_dump(job)


INVALID = [
    ("not: [yaml", "is not valid YAML"),
    ("", "is empty"),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n", "no PyTorchJob in the file"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2)),
     "spec.pytorchReplicaSpecs.Master.replicas: must be written and be exactly 1 (got 2)"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"].update(Chief=j["spec"]["pytorchReplicaSpecs"]["Worker"])),
     "spec.pytorchReplicaSpecs.Chief: is not a PyTorchJob replica type"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(name="main")),
     "has no container named pytorch"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("image")),
     "image: is missing"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]
              ["limits"].update(memory="1Gi")), "limits.memory: is below the master request 4Gi"),
    (_mutated(lambda j: j["metadata"].update(name="Bad_Name")), "metadata.name: is not a DNS-1035 label"),
    (_mutated(lambda j: j["spec"].update(nprocPerNode=2)), "spec.nprocPerNode: must be a string"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].update(
        imagePullPolicy=["Always"])), "spec.pytorchReplicaSpecs.Master.template.spec.containers.0.imagePullPolicy"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
        image="harbor.vsphere.local/library/other:2")), "differs between Master and Worker"),
    (_mutated(lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"].update(tolerations=["a", "b"])),
     "spec.pytorchReplicaSpecs.Master.template.spec.tolerations.0: 'a' is not of type 'object'"),
    (_mutated(lambda j: [s["template"]["spec"]["containers"][0].update(image="busybox")
                         for s in j["spec"]["pytorchReplicaSpecs"].values()]), "must name exactly one of a tag or a digest"),
]


@pytest.mark.parametrize("text, message", INVALID, ids=[m for _, m in INVALID])
def test_invalid_manifests_are_refused_without_output(tmp_path, text, message):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(text)
    out = tmp_path / "values.yaml"
    code, stdout, stderr = run("import", str(manifest), "-o", str(out))
    assert code == 1, stderr
    assert message in stderr and "Traceback" not in stderr
    assert not out.exists()


@pytest.mark.parametrize("change", [
    lambda c: c.setdefault("env", []).append({"name": "EXTRA", "value": "1"}),
    lambda c: c.__setitem__("env", (c.get("env") or [])[:-1]) if c.get("env") else c.update(env=[{"name": "X", "value": "1"}]),
    lambda c: c.setdefault("args", []).append("--more"),
], ids=["an extra env var", "a missing env var", "an extra arg"])
def test_compare_notices_lists_of_other_lengths(change):
    original = yaml.safe_load((MANIFESTS / "vsphere-cpu.yaml").read_text())
    changed = copy.deepcopy(original)
    change(next(iter(changed["spec"]["pytorchReplicaSpecs"].values()))["template"]["spec"]["containers"][0])
    assert importer.compare(original, changed)


def test_elastic_rendezvous_scheduling_and_digest_round_trip(tmp_path):
    job = yaml.safe_load((MANIFESTS / "elastic-workers.yaml").read_text())
    job["spec"]["elasticPolicy"].update(rdzvHost="etcd.infra", rdzvId="run-7", rdzvBackend="etcd-v2", rdzvPort=2379)
    job["spec"].setdefault("runPolicy", {})["schedulingPolicy"] = {"minAvailable": 2, "priorityClass": "high"}
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = "reg.io/train@sha256:" + "a" * 64
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    values_file = tmp_path / "values.yaml"
    code, _, err = run("import", str(manifest), "-o", str(values_file))
    assert code == 0, err
    values = yaml.safe_load(values_file.read_text())
    assert values["image"]["digest"] == "sha256:" + "a" * 64
    code, rendered, err = run("render", str(values_file), "--namespace", job["metadata"].get("namespace", "default"))
    assert code == 0, err
    (back,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PyTorchJob"]
    assert importer.compare(job, back) == []
    assert back["spec"]["elasticPolicy"]["rdzvHost"] == "etcd.infra"
    assert back["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] == "high"


def _node_loss(seconds, keys=("not-ready", "unreachable")):
    return [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
            for key in keys]


def _import_round_trip(job, tmp_path):
    """The values `import` makes of the job, after checking that they render it back."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    code, out, err = run("import", str(manifest))
    assert code == 0, err
    values = yaml.safe_load(out)
    assert importer.compare(job, importer.render_job(values, namespace=job["metadata"].get("namespace", "default"))) == []
    return values


def test_the_node_loss_tolerations_on_every_pod_import_as_the_value(tmp_path):
    job = yaml.safe_load((MANIFESTS / "vsphere-gpu.yaml").read_text())
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["tolerations"] += _node_loss(90)
    values = _import_round_trip(job, tmp_path)
    assert values["nodeLossTolerationSeconds"] == 90
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize("master, worker", [
    (_node_loss(90), []),  # the Master alone
    (_node_loss(90), _node_loss(30)),  # other seconds
    (_node_loss(90, ["unreachable"]), _node_loss(90, ["unreachable"])),  # one key
    (_node_loss(90, ["unreachable", "not-ready"]), _node_loss(90, ["unreachable", "not-ready"])),  # another order
    (_node_loss(600, ["unreachable"]) + _node_loss(90), _node_loss(600, ["unreachable"]) + _node_loss(90)),  # a second deadline
], ids=["master only", "other seconds", "one key", "another order", "a second deadline"])
def test_node_loss_tolerations_the_value_would_not_render_stay_tolerations(tmp_path, master, worker):
    job = yaml.safe_load((MANIFESTS / "vsphere-cpu.yaml").read_text())
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["template"]["spec"]["tolerations"] = master
    specs["Worker"]["template"]["spec"]["tolerations"] = worker
    values = _import_round_trip(job, tmp_path)
    assert "nodeLossTolerationSeconds" not in values


def test_a_trainjobs_node_loss_tolerations_import_as_the_value(tmp_path):
    from generator import helm, paths

    values = {"target": "v2", "nodeLossTolerationSeconds": 75, "tolerations": [{"key": "pool", "operator": "Exists"}]}
    rendered = [o for o in helm.render_objects(paths.JOB_CHART, values) if o["kind"] != "PersistentVolumeClaim"]
    manifest = tmp_path / "trainjob.yaml"
    manifest.write_text(yaml.safe_dump_all(rendered))
    code, out, err = run("import", str(manifest))
    assert code == 0, err
    imported = yaml.safe_load(out)
    assert imported["nodeLossTolerationSeconds"] == 75 and imported["tolerations"] == values["tolerations"]


@pytest.mark.parametrize("scenario", ["v2", "v2-plain"])
def test_a_trainjob_imports_to_values_that_render_it_back(tmp_path, scenario):
    from generator import helm, paths
    from tests.support import scenarios

    rendered = [o for o in scenarios.render_objects("pytorchjob", scenario) if o["kind"] != "PersistentVolumeClaim"]
    manifest = tmp_path / "trainjob.yaml"
    manifest.write_text(yaml.safe_dump_all(rendered))
    code, out, err = run("import", str(manifest))
    assert code == 0, err
    values = yaml.safe_load(out)
    assert values["target"] == "v2"
    again = helm.render_objects(paths.JOB_CHART, values, scenarios.RELEASE, scenarios.NAMESPACE)
    kinds = {o["kind"]: o for o in again}
    for original in rendered:
        back = kinds[original["kind"]]
        assert back["spec"] == original["spec"], original["kind"]


def test_a_trainjob_whose_runtime_is_missing_or_foreign_is_refused(tmp_path):
    job = trainjobs.trainjob("t", {"image": trainjobs.IMAGE, "numNodes": 2}, {"name": "t", "kind": "TrainingRuntime"})
    manifest = tmp_path / "t.yaml"
    manifest.write_text(yaml.safe_dump(job))
    code, _, err = run("import", str(manifest))
    assert code == 1 and "spec.runtimeRef.name: names a TrainingRuntime that is not in the file" in err
    job["spec"]["runtimeRef"] = {"name": "deepspeed-distributed", "kind": "ClusterTrainingRuntime"}
    manifest.write_text(yaml.safe_dump(job))
    code, _, err = run("import", str(manifest))
    assert code == 1 and "spec.runtimeRef: names a runtime the chart does not render" in err
    job["spec"]["runtimeRef"] = {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"}
    job["spec"]["runtimePatches"] = [{"manager": "me"}]
    manifest.write_text(yaml.safe_dump(job))
    code, _, err = run("import", str(manifest))
    assert code == 1 and "TrainJob.spec.runtimePatches: cannot be carried by the chart's values" in err


@pytest.mark.parametrize("command", [["import"], ["validate"], ["convert", "--to", "v2"]])
def test_a_bad_registry_config_is_refused_by_each_command_before_any_job_is_read(command, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"auths": {"ghcr.io": {"auth": "%%%"}}}')
    code, out, err = run(*command, str(MANIFESTS / "vsphere-cpu.yaml"), "--registry-config", str(bad))
    assert code == 1 and out == "" and "Traceback" not in err
    assert f"--registry-config {bad}: auths.ghcr.io.auth is not base64 (got '%%%')" in err
