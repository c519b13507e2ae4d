"""`run --container`: what each replica's `podman run` is, built from the same plan as the
process runner's (names, env, volumes, the pod's securityContext and limits), and what is refused
before anything starts. tests/e2e/test_images.py runs such jobs in real containers."""
import json
from pathlib import Path

import pytest

from generator import helm, paths
from generator.errors import UserError
from generator.kinds.pytorchjob import plan as v1_plan
from generator.kinds.trainjob import plan as v2_plan
from generator.local import plan as local_plan
from generator.local.backends.containers import command as containers
from generator.local.backends.containers.backend import Containers
from generator.local.backends.containers.network import Network
from tests.support import docs, local_jobs
from tests.support.cli_helpers import run

CONTAINERS = Containers(Network("demo", "10.89.7.0/24"))
# The demo's values (`make demo`): 1 Master + 2 Workers of the trainer, the output claim on the Master.
DEMO = {"job": {"name": "demo"}, "topology": {"workers": 2},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "output": {"enabled": True, "size": "1Gi"}, "args": ["--dataset=digits", "--epochs=1", "--threads=1"]}


def value(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_each_replica_of_the_demo_runs_its_image_by_the_operators_names_as_the_pods_user(tmp_path):
    job = next(o for o in helm.render_objects(paths.JOB_CHART, DEMO) if o["kind"] == "PyTorchJob")
    plan = v1_plan.plan(job, tmp_path, backend=CONTAINERS)
    master, worker0, worker1 = plan.replicas
    # The operator's env, with the Master by its Service's name and its pytorchjob-port.
    assert (worker1.env["MASTER_ADDR"], worker1.env["MASTER_PORT"], worker1.env["WORLD_SIZE"], worker1.env["RANK"]) == \
        ("demo-master-0", "23456", "3", "2")
    assert worker1.env["PET_MASTER_ADDR"] == "demo-master-0" and worker1.env["PET_NNODES"] == "3"
    assert worker1.env["OUTPUT_DIR"] == "/opt/pytorch/output"  # a path in the container, never mapped

    argv = containers.argv(plan, worker1, "ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda", owner="7-9")
    assert argv[:3] == ["podman", "run", "--rm"]
    assert value(argv, "--name") == value(argv, "--hostname") == ["demo-worker-1"]
    assert value(argv, "--network") == ["demo"] and value(argv, "--ip") == ["10.89.7.4"]
    assert value(argv, "--add-host") == ["demo-master-0:10.89.7.2", "demo-worker-0:10.89.7.3", "demo-worker-1:10.89.7.4"]
    assert value(argv, "--label") == ["io.pytorchjob-kit.run=7-9"]
    # The chart's pod: runAsUser/runAsGroup 1000, fsGroup, no escalation, every capability dropped.
    assert value(argv, "--user") == ["1000:1000"] and value(argv, "--group-add") == ["1000"]
    assert value(argv, "--security-opt") == ["no-new-privileges"] and value(argv, "--cap-drop") == ["ALL"]
    assert "--read-only" not in argv  # the chart does not ask for it
    assert value(argv, "--memory") == [str(4 * 2**30)] and value(argv, "--cpus") == []  # its limits: memory only
    assert value(argv, "--shm-size") == [str(2**30)]  # the dshm emptyDir's sizeLimit
    # No command: the image's ENTRYPOINT runs, with the container's args after the image.
    assert "--entrypoint" not in argv
    assert argv[-6:] == ["ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda", "--backend", "gloo", "--dataset=digits", "--epochs=1",
                         "--threads=1"]
    # Only the Master mounts the claim, at the image's output folder.
    assert value(argv, "--volume") == []
    assert value(containers.argv(plan, master, "x"), "--volume") == [f"{tmp_path / 'demo-output'}:/opt/pytorch/output"]
    assert value(containers.argv(plan, worker0, "x"), "--ip") == ["10.89.7.3"]


def test_trainer_v2_nodes_meet_at_node_0_under_the_jobs_headless_service_on_port_29500(tmp_path):
    values = {**DEMO, "target": "v2", "job": {"name": "digits-v2"}, "topology": {"workers": 1},
              "output": {"enabled": True, "mountOn": "all", "accessModes": ["ReadWriteMany"]}}
    plan = v2_plan.plan(helm.render_objects(paths.JOB_CHART, values), tmp_path,
                                    backend=Containers(Network("digits-v2", "10.89.3.0/24")))
    node0, node1 = plan.replicas
    assert {k: node1.env[k] for k in ("PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NODE_RANK", "PET_NNODES")} == {
        "PET_MASTER_ADDR": "digits-v2-node-0-0.digits-v2", "PET_MASTER_PORT": "29500", "PET_NODE_RANK": "1",
        "PET_NNODES": "2"}
    assert "RANK" not in node1.env and "MASTER_ADDR" not in node1.env and node0.env["PET_NODE_RANK"] == "0"
    argv = containers.argv(plan, node1, "trainer:local")
    assert value(argv, "--name") == value(argv, "--hostname") == ["digits-v2-node-0-1"]
    assert value(argv, "--add-host") == ["digits-v2-node-0-0.digits-v2:10.89.3.2", "digits-v2-node-0-1.digits-v2:10.89.3.3"]
    # The TrainJob's command replaces the image's ENTRYPOINT; every node mounts the claim.
    assert json.loads(value(argv, "--entrypoint")[0]) == ["torchrun", "--module", "trainer"]
    assert value(argv, "--volume") == [f"{tmp_path / 'digits-v2-output'}:/opt/pytorch/output"]
    assert value(argv, "--cpus") == ["1"]  # the chart's CPU limit beside its memory limit, for v2


def test_a_containers_own_settings_become_the_engines_flags_and_secrets_stay_off_the_command_line(tmp_path, monkeypatch):
    body, _ = local_jobs.job("own", "pass")
    pod = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    c = pod["containers"][0]
    c.update(command=["bash", "-c", "echo $(GREETING)"], workingDir="/work/./src", image="registry.example.com/ml/own:2",
             securityContext={"runAsUser": 2000, "readOnlyRootFilesystem": True, "capabilities": {"add": ["NET_RAW"]}},
             resources={"limits": {"cpu": "1500m", "memory": "512Mi"}},
             volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}, {"name": "data", "mountPath": "/data", "readOnly": True}],
             env=[{"name": "GREETING", "value": "hi"}, {"name": "PATH", "value": "/opt/venv/bin:/usr/bin"},
                  {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                  {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])
    pod["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    monkeypatch.setenv("TOKEN", "s3cret")
    plan = v1_plan.plan(body, tmp_path, backend=CONTAINERS)
    (master,) = plan.replicas
    argv = containers.argv(plan, master, "registry.example.com/ml/own:2", engine="docker")
    assert json.loads(value(argv, "--entrypoint")[0]) == ["bash", "-c", "echo hi"]  # $(VAR) expanded as Kubernetes does
    assert value(argv, "--workdir") == ["/work/src"] and value(argv, "--user") == ["2000"]
    assert "--read-only" in argv and "--read-only-tmpfs=false" not in argv  # Docker adds no tmpfs anyway
    assert value(argv, "--cap-add") == ["NET_RAW"] and value(argv, "--cpus") == ["1.5"]
    assert value(argv, "--memory") == [str(512 * 2**20)] and value(argv, "--shm-size") == []
    assert value(argv, "--volume") == [f"{tmp_path / 'pods' / 'master-0' / 'scratch'}:/scratch", f"{tmp_path / 'data'}:/data:ro"]
    assert master.env["IP"] == "10.89.7.2"  # the downward API's podIP is the container's address
    # Values go by name from the client's environment, but for what the client itself reads.
    assert "TOKEN" in value(argv, "--env") and "s3cret" not in " ".join(argv)
    assert "PATH=/opt/venv/bin:/usr/bin" in value(argv, "--env")
    env = containers.client_env(master, {"PATH": "/usr/bin", "CONTAINERS_CONF": "/x"})
    assert env["TOKEN"] == "s3cret" and env["PATH"] == "/usr/bin" and env["GREETING"] == "hi"

    c["securityContext"] = {"runAsUser": 0}
    pod["securityContext"] = {"runAsNonRoot": True}
    with pytest.raises(UserError) as refused:
        v1_plan.plan(body, tmp_path, backend=CONTAINERS)
    assert "containers[pytorch].securityContext.runAsUser" in str(refused.value) and "runAsNonRoot" in str(refused.value)


def test_the_readmes_container_run_prints_the_plan_it_shows(tmp_path):
    """The README's `run --container` of `make demo`'s values: its header and the Master's line, as
    the plan prints them on a network at the first subnet of podman's pool."""
    import re

    from generator.kinds import source
    from tests.support import ROOT

    shown = docs.block("run.md", "Run a job here", fence="text", after="With `--container`")
    demo = re.search(r"^demo: venv\n\t\$\(PY\) -m generator (values .*?-o) runs/demo-values.yaml", (ROOT / "Makefile").read_text(),
                     re.S | re.M).group(1).replace("\\\n", " ")
    code, _, err = run(*demo.split(), str(tmp_path / "demo-values.yaml"))
    assert code == 0, err
    loaded = source.read(str(tmp_path / "demo-values.yaml"), "demo", "default", None)
    plan = loaded.kind.plan(loaded.objects, Path("runs/demo"), "default", Containers(Network("demo", "10.89.0.0/24")))
    assert shown.splitlines()[:2] == local_plan.describe(plan).splitlines()[:2]
