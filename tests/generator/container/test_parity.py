"""What runs locally is what runs on the cluster: the same pod specs go through `generator run`'s
plan and the process node's resolution (nothing started), and both give the same argv, env and
working folder, except the differences the README names, listed here as data with their reasons."""
from __future__ import annotations

import base64
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from generator.container import programs
from generator.controlplane import kubelet as kubelets
from generator.controlplane.kubelet import node as nodes
from generator.controlplane.kubelet import pod as pods
from generator.controlplane.layout import MARKER
from generator.kinds.pytorchjob import plan as v1_plan
from generator.local import plan as local_plan
from generator.local import runner as local_run
from tests.support import kubelet_node

JOB, UID, POD_IP, NODE_IP, NODE_NAME = "par", "8d6f0c1e-0000-4000-8000-000000000003", "10.244.7.2", "10.244.7.1", "node-a"
TRAINER = "ghcr.io/pytorchjob-kit/trainer:0.1.0"
SECRET = "s3cret"

# What training-operator v1.9 appends to the Master's container env for a one-pod job.
OPERATOR_ENV = {"PYTHONUNBUFFERED": "1", "MASTER_ADDR": f"{JOB}-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "1",
                "RANK": "0", "PET_MASTER_ADDR": f"{JOB}-master-0", "PET_MASTER_PORT": "23456", "PET_NODE_RANK": "0",
                "PET_NPROC_PER_NODE": "auto", "PET_NNODES": "1"}

# Where run's injected variables differ from the operator's, as the README names them.
INJECTED = {"MASTER_ADDR": "run's Master is on this machine's loopback, not at the pod name <job>-master-0",
            "PET_MASTER_ADDR": "as MASTER_ADDR",
            "MASTER_PORT": "run takes a free port so two local runs never collide; the operator's is 23456",
            "PET_MASTER_PORT": "as MASTER_PORT"}

# The differences in resolving the same pod, which the README names: each a value that differs,
# written as the same placeholder on both sides before comparing.
DIFFERENCES = [
    ("<address>", "run gives every address as loopback (the pod's IP, the node's): its processes share this "
                  "machine's network", ["127.0.0.1"], ["127.0.0.1", POD_IP, NODE_IP]),
    ("<node name>", "run's node is this machine", [socket.gethostname()], [NODE_NAME]),
]
FOLDERS = "volumes and the pod's own disk are folders: under the run folder for run, under the node's pod folder there"
ONLY_ON_NODE = {
    "HOSTNAME": "the node gives each pod its own hostname; run's processes keep this machine's",
    "HOME": "the node gives each pod a home folder of its own; run passes your shell's HOME through",
    "KUBERNETES_SERVICE_HOST": "the API server's address; run has no cluster",
    "KUBERNETES_SERVICE_PORT": "the API server's port; run has no cluster",
    "KUBERNETES_SERVICE_PORT_HTTPS": "the API server's port; run has no cluster",
    "KUBERNETES_PORT": "the API server's address; run has no cluster",
    MARKER: "marks the node's processes as its cluster's, so `cluster down` finds them",
}
NO_WORKING_DIR = "without workingDir run starts in your shell's folder, so relative paths you typed work; the node in the pod's own"

SPECS = {
    "plain env and the issue's $(VAR) case": {
        "env": [{"name": "A", "value": "alpha"}, {"name": "B", "value": "$(A)-x"}, {"name": "C", "value": "$$(A)"},
                {"name": "D", "value": "$(NOT_DEFINED)-$(B)"}],
        "args": ["--tag=$(A)", "--b=$(B)", "$$(A)", "$(NOT_DEFINED)"]},
    "$(VAR) chains through the operator's variables": {
        "env": [{"name": "EARLY", "value": "$(MASTER_ADDR)"}, {"name": "LR", "value": "0.1"},
                {"name": "OPTS", "value": "--lr=$(LR)"}],
        "args": ["--master=$(MASTER_ADDR):$(MASTER_PORT)", "--world=$(WORLD_SIZE)", "$(OPTS)"]},
    "downward API: fieldRef and resourceFieldRef": {
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                {"name": "ASKED", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}}],
        "args": ["--name=$(POD)", "--threads=$(CPUS)"],
        "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}},
    "command and args": {
        "command": ["torchrun", "--nproc-per-node=$(NPROC)", "--module", "trainer"],
        "args": ["--epochs", "$(EPOCHS)"],
        "env": [{"name": "NPROC", "value": "1"}, {"name": "EPOCHS", "value": "3"}]},
    "volumes as folders, workingDir in one": {
        "workingDir": "/workspace/run",
        "args": ["--data=/data/train", "--output-dir=/data/out", "/workspace/cfg.yaml"],
        "env": [{"name": "DATA", "value": "/data"}, {"name": "PATHS", "value": "a:/workspace/x"},
                {"name": "OUTPUT_DIR", "value": "/opt/pytorch/output"}],
        "volumeMounts": [{"name": "claim", "mountPath": "/data"}, {"name": "ws", "mountPath": "/workspace"}]},
    "workingDir on the container's own disk": {"workingDir": "/opt/app", "args": ["--epochs=1"]},
    "a Secret key": {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                             {"name": "AUTH", "value": "Bearer $(TOKEN)"}]},
    # Kubernetes allows '.', '-' and '_' in env names, and expands $(NAME) of each.
    "env names with dots, dashes and underscores": {
        "command": ["torchrun", "--nproc-per-node=$(my.var)", "--module", "trainer"],
        "args": ["--run=$(a-b)", "$(_x)"],
        "env": [{"name": "my.var", "value": "2"}, {"name": "a-b", "value": "exp-7"}, {"name": "_x", "value": "--fast"},
                {"name": "ALL", "value": "$(my.var)/$(a-b)/$(_x)"}]},
}
VOLUMES = [{"name": "claim", "persistentVolumeClaim": {"claimName": "results"}}, {"name": "ws", "emptyDir": {}}]


def container(spec: dict) -> dict:
    return {"name": "pytorch", "image": TRAINER, **spec}


def run_side(spec: dict, run_dir: Path, aliases: dict[str, str] | None = None
             ) -> tuple[list[str], dict[str, str], Path | None, dict[str, str]]:
    """`generator run`: the plan of a one-pod PyTorchJob; argv, the process env (nothing of the
    shell passed through), the working folder, and folder -> placeholder."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": JOB},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
               "metadata": {"labels": {"app": JOB}},
               "spec": {"containers": [container(spec)], "volumes": VOLUMES}}}}}}
    (replica,) = v1_plan.plan(job, run_dir, aliases=aliases).replicas
    volume_of = {m["mountPath"]: m["name"] for m in spec.get("volumeMounts") or []}
    folders = {str(folder): f"<volume {volume_of[path]}>" for path, folder in replica.mounts.items()}
    folders[str(run_dir / local_plan.DISKS / replica.name)] = "<pod folder>"
    return replica.argv, local_run.process_env(replica, environ={}), replica.cwd, folders


class Core:
    def read_namespaced_secret(self, name, namespace):
        assert (name, namespace) == ("creds", "default")
        return SimpleNamespace(data={"token": base64.b64encode(SECRET.encode()).decode()})


class Node(kubelet_node.Node):
    """The kubelet a PodWorker asks, with the real base_env."""
    base_env = kubelets.Kubelet.base_env

    def __init__(self, root: Path) -> None:
        super().__init__(root, core=Core(), node_ip=NODE_IP, allocatable=nodes.capacity(None, None, 0))
        self.server = f"https://{NODE_IP}:6443"


def node_side(spec: dict, root: Path, injected: dict[str, str], aliases: dict[str, str] | None = None
              ) -> tuple[list[str], dict[str, str], Path, dict[str, str]]:
    """The process node: the pod the operator creates with `injected` appended to the container's
    env, resolved as `_start` resolves it."""
    c = container(spec)
    c["env"] = [*(c.get("env") or []), *({"name": k, "value": v} for k, v in injected.items())]
    pod = {"metadata": {"name": f"{JOB}-master-0", "namespace": "default", "uid": UID, "labels": {"app": JOB}},
           "spec": {"containers": [c], "volumes": VOLUMES, "nodeName": NODE_NAME, "restartPolicy": "OnFailure"}}
    worker = pods.PodWorker(Node(root), pod)
    worker.pod_ip = POD_IP
    paths = {v["name"]: worker.folder / "volumes" / v["name"] for v in VOLUMES}
    worker.volumes = SimpleNamespace(paths=paths)
    ready = worker.prepare(worker.main[0], programs.resolve(c["image"], aliases))
    folders = {str(folder): f"<volume {name}>" for name, folder in paths.items()}
    folders[str(worker.folder)] = "<pod folder>"
    return ready.argv, ready.env, ready.cwd, folders


def normal(text: str, folders: dict[str, str], values: list[tuple[str, list[str]]]) -> str:
    for folder in sorted(folders, key=len, reverse=True):
        text = text.replace(folder, folders[folder])
    for placeholder, found in values:
        for value in found:
            text = re.sub(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", placeholder, text)
    return text


@pytest.mark.parametrize("case", SPECS)
def test_run_and_the_node_start_the_same_container(case, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKEN", SECRET)  # run's Secrets come from the shell's variable of the same name
    spec = SPECS[case]
    l_argv, l_env, l_cwd, l_folders = run_side(spec, tmp_path / "run")
    # The operator's variables, as run injects them: only the named ones differ ...
    same = [k for k in OPERATOR_ENV if k not in INJECTED]
    assert {k: l_env[k] for k in same} == {k: OPERATOR_ENV[k] for k in same}
    # ... and the node gets run's values, so what follows compares resolving the pod alone.
    n_argv, n_env, n_cwd, n_folders = node_side(spec, tmp_path / "node", {k: l_env[k] for k in OPERATOR_ENV})
    l_values = [(p, found) for p, _, found, _ in DIFFERENCES]
    n_values = [(p, found) for p, _, _, found in DIFFERENCES]
    assert [normal(a, l_folders, l_values) for a in l_argv] == [normal(a, n_folders, n_values) for a in n_argv]
    assert {k: normal(v, l_folders, l_values) for k, v in l_env.items()} == {
        k: normal(v, n_folders, n_values) for k, v in n_env.items() if k not in ONLY_ON_NODE}
    if spec.get("workingDir"):
        assert normal(str(l_cwd), l_folders, l_values) == normal(str(n_cwd), n_folders, n_values)
    else:
        assert l_cwd is None and n_cwd == tmp_path / "node" / "pods" / f"default_{JOB}-master-0_{UID}" / "workdir"


def test_the_issues_case_expands_in_run_as_on_the_node(tmp_path):
    """values with env A=alpha, B=$(A)-x and args --tag=$(A): `run` once passed `--tag=$(A)` literally."""
    argv, env, _, _ = run_side(SPECS["plain env and the issue's $(VAR) case"], tmp_path / "run")
    assert argv[-4:] == ["--tag=alpha", "--b=alpha-x", "$(A)", "$(NOT_DEFINED)"]
    assert (env["B"], env["C"], env["D"]) == ("alpha-x", "$(A)", "$(NOT_DEFINED)-alpha-x")


def test_env_names_with_dots_and_dashes_expand_in_command_args_and_env_in_run_and_on_the_node(tmp_path):
    """Compared side by side, a reference both leave as written would look alike: each side's own result."""
    spec = SPECS["env names with dots, dashes and underscores"]
    argv, env, _, _ = run_side(spec, tmp_path / "run")
    n_argv, n_env, _, _ = node_side(spec, tmp_path / "node", {k: env[k] for k in OPERATOR_ENV})
    for got_argv, got_env in ((argv, env), (n_argv, n_env)):
        start = next(i for i, a in enumerate(got_argv) if a.startswith("--nproc-per-node"))
        assert got_argv[start:] == ["--nproc-per-node=2", "--module", "trainer", "--run=exp-7", "--fast"]
        assert got_env["ALL"] == "2/exp-7/--fast"


def test_each_named_difference_has_a_reason():
    reasons = [d[1] for d in DIFFERENCES] + [*INJECTED.values(), *ONLY_ON_NODE.values(), FOLDERS, NO_WORKING_DIR,
                                             CODE_MOUNTED]
    assert all(len(r) > 10 for r in reasons)


# Your own code (`--image REPO=DIR`): run writes the code folder in place of the image's path;
# the node mounts it there, so its argv keeps the image's path.
CODE_MOUNTED = "the node mounts the image's code folder at its path (read-only); run writes the folder in its place"
USER_SPECS = {
    "python and a volume": {"command": ["python", "/workspace/train.py"], "args": ["--out", "/data/out"],
                            "volumeMounts": [{"name": "claim", "mountPath": "/data"}]},
    "torchrun in workingDir": {"command": ["torchrun", "--nproc-per-node=$(N)", "train.py"], "workingDir": "/workspace",
                               "env": [{"name": "N", "value": "2"}]},
    "bash -c with a heredoc": {"command": ["bash", "-c"], "args": [
        "cd /workspace && python - <<'EOF'\nprint(open('/data/in').read())\nEOF\ntorchrun /workspace/train.py"],
        "volumeMounts": [{"name": "claim", "mountPath": "/data"}]},
}


@pytest.mark.parametrize("case", USER_SPECS)
def test_run_and_the_node_start_your_own_code_alike(case, tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    aliases = {"registry.example.com/ml/toy": str(folder)}
    spec = {"image": "registry.example.com/ml/toy:1.4", **USER_SPECS[case]}
    l_argv, l_env, l_cwd, l_folders = run_side(spec, tmp_path / "run", aliases)
    n_argv, n_env, n_cwd, n_folders = node_side(spec, tmp_path / "node", {k: l_env[k] for k in OPERATOR_ENV}, aliases)
    l_folders[str(folder)] = "/workspace"  # CODE_MOUNTED
    l_values = [(p, found) for p, _, found, _ in DIFFERENCES]
    n_values = [(p, found) for p, _, _, found in DIFFERENCES]
    assert [normal(a, l_folders, l_values) for a in l_argv] == [normal(a, n_folders, n_values) for a in n_argv]
    assert {k: normal(v, l_folders, l_values) for k, v in l_env.items()} == {
        k: normal(v, n_folders, n_values) for k, v in n_env.items() if k not in ONLY_ON_NODE}
    assert "PYTHONPATH" not in l_env  # this checkout is on the trainer's path, never on your code's
    assert normal(str(l_cwd), l_folders, l_values) == str(n_cwd) == "/workspace"  # the code's folder, both ways
