"""Real images built here and the registry on this machine: the trainer's image trains under
`podman run` as the chart runs it, the registry holds every image the charts name and answers
only its own client, and the controllers' images start their built binaries. `make e2e` builds
the images and starts the registry before the suite (`generator image registry up`), once per
machine; these tests find them there."""
from __future__ import annotations

import json
import os
import re
import socket
import ssl
import stat
import subprocess
import sys

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.e2e


def generator(*args: str, timeout: float = 3000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout)


@pytest.fixture(scope="module")
def registry():
    """The machine's registry, up with every image (already, after `make e2e`'s first step)."""
    from generator.controlplane import registry as registry_

    proc = generator("image", "registry", "up", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return registry_.default()


@pytest.fixture(scope="module")
def engine(registry):
    from generator.images import engine as engine_

    return engine_.get(say=lambda line: None)


@pytest.fixture(scope="module")
def trainer_image(registry, engine):
    from generator.images import trainer

    proc = generator("image", "build", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "up to date: " + trainer.reference(trainer.choose("auto", say=lambda line: None))
    return proc.stdout.strip().split(": ", 1)[1]


def forget(registry, name: str) -> None:
    """A test's image out of the machine's registry again (its storage is shared by every run)."""
    from generator.images.registry import split

    digest = registry.has(name)
    if digest:
        repo, _ = split(name)
        assert registry.request(f"/v2/{repo}/manifests/{digest}", method="DELETE")[0] == 202


def test_the_trainer_image_trains_as_uid_1000_on_a_read_only_root_with_its_output_on_a_volume(engine, trainer_image,
                                                                                              tmp_path):
    config = json.loads(engine.run("image", "inspect", trainer_image).stdout)[0]["Config"]
    assert config["User"] == "1000:1000" and config["Entrypoint"] == ["python", "-m", "trainer"]
    out = tmp_path / "output"
    out.mkdir()
    os.chown(out, 1000, 1000)
    # As the job chart runs it: its entrypoint, the user of its podSecurityContext, a read-only root,
    # the output on a volume at the image's own output folder.
    proc = engine.run("run", "--rm", "--read-only", "--user", "1000:1000", "--volume", f"{out}:/opt/pytorch/output",
                      trainer_image, "--dataset", "digits", "--epochs", "1", "--threads", "1", check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["final_accuracy"] > 0.5
    assert (out / "mnist_cnn.pt").stat().st_uid == 1000


def test_the_image_holds_the_trainer_alone_without_the_generator(engine, trainer_image):
    proc = engine.run("run", "--rm", "--entrypoint", "python", trainer_image, "-c",
                      "import importlib.util as u; print([m for m in ('trainer', 'torch', 'generator', 'click', "
                      "'kubernetes') if u.find_spec(m)])", timeout=300)
    assert proc.stdout.strip() == "['trainer', 'torch']"


def test_the_registry_holds_every_image_the_charts_name(registry):
    from generator.controlplane import chart_images

    named = chart_images.named()
    assert {"ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489", "docker.io/library/alpine:3.10",
            "docker.io/curlimages/curl:8.10.1", "ghcr.io/pytorchjob-kit/trainer:0.1.0",
            "ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda"} <= set(named)
    assert any(n.startswith("ghcr.io/kubeflow/trainer/trainer-controller-manager:") for n in named)
    assert any("/jobset/jobset:" in n for n in named)
    assert set(named) <= set(registry.catalog())


def test_the_registry_listens_on_loopback_and_answers_only_its_own_client(registry):
    host, port = registry.address.split(":")
    assert host == "127.0.0.1"
    listening = [line.split()[1] for path in ("/proc/net/tcp", "/proc/net/tcp6")
                 for line in open(path).read().splitlines()[1:] if line.split()[3] == "0A"]
    assert [a for a in listening if int(a.rsplit(":", 1)[1], 16) == int(port)] == ["0100007F:" + f"{int(port):04X}"]
    # Another user of the machine can connect, but without the client certificate TLS goes no further.
    context = ssl.create_default_context(cafile=str(registry.certs / "ca.crt"))
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            with context.wrap_socket(sock, server_hostname=host) as tls:
                tls.sendall(b"GET /v2/_catalog HTTP/1.1\r\nHost: x\r\n\r\n")
                tls.recv(100)
    assert registry.request("/v2/_catalog")[0] == 200  # with it, the catalog
    # Its folder is its owner's alone: storage, keys, configuration, log.
    assert stat.S_IMODE(registry.root.stat().st_mode) == 0o700
    for key in (registry.pki / "ca.key", registry.pki / "server.key", registry.certs / "client.key", registry.log):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key


@pytest.mark.parametrize("image, argv, user, expected", [
    ("ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489", ["--help"], "65532:65532", "-pytorch-init-container-image"),
    ("ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0", ["--help"], "65532:65532", "Usage of /manager"),
    ("us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset:main", ["--help"], "65532:65532", "Usage of /manager"),
    ("docker.io/library/alpine:3.10", ["ls", "-l", "/bin/nslookup"], "", "/bin/nslookup -> /bin/busybox"),
    ("docker.io/curlimages/curl:8.10.1", ["--version"], "100:101", "Protocols:"),
], ids=["training-operator", "trainer-controller", "jobset", "alpine", "curl"])
def test_the_charts_images_run_what_they_stand_for(engine, registry, image, argv, user, expected):
    config = json.loads(engine.run("image", "inspect", image).stdout)[0]["Config"]
    assert config.get("User", "") == user
    proc = engine.run("run", "--rm", image, *argv, check=False, timeout=120)
    # A controller's --help exits 0, or 2 with Go's flag package, after its usage.
    assert proc.returncode in (0, 2) and expected in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_your_own_dockerfile_builds_once_and_the_registry_takes_it_from_the_store_or_an_archive(engine, registry, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('trained by my own image')\n")
    # The trainer's way of naming its base: python:3.11-slim where a registry serves it, else the base made here.
    (project / "Dockerfile").write_text('ARG BASE=python:3.11-slim\nFROM ${BASE}\nWORKDIR /workspace\nCOPY train.py ./\n'
                                        'USER 1000:1000\nENTRYPOINT ["python", "train.py"]\n')
    tag = f"localhost/pytorchjob-kit-e2e/own-{os.getpid()}:1"
    first = generator("image", "build", str(project), "-t", tag, "--quiet")
    assert first.returncode == 0 and first.stdout == f"built: {tag}\n", first.stderr
    again = generator("image", "build", str(project), "-t", tag, "--quiet")
    assert again.stdout == f"up to date: {tag}\n"
    assert engine.run("run", "--rm", "--read-only", tag).stdout == "trained by my own image\n"

    loaded = generator("image", "load", tag)
    assert loaded.returncode == 0 and loaded.stdout == f"holds {registry.address}/{tag}\n", loaded.stderr
    assert registry.has(tag)
    archive = tmp_path / "own.tar"
    engine.run("save", "--format", "oci-archive", "-o", str(archive), tag)
    refused = generator("image", "load", str(archive))
    assert refused.returncode == 1 and "an archive names no image the registry could hold it as; add --as" in refused.stderr
    name = f"registry.example.com/ml/own-{os.getpid()}:2"
    loaded = generator("image", "load", str(archive), "--as", name)
    assert loaded.returncode == 0 and registry.has(name), loaded.stderr
    engine.run("rmi", tag)
    forget(registry, tag)
    forget(registry, name)
    assert not registry.has(name)


def test_a_dockerfile_that_fails_and_an_image_that_does_not_exist_are_named_with_the_fix(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM localhost/pytorchjob-kit-e2e/no-such-base:1\n")
    proc = generator("image", "build", str(tmp_path), "-t", "localhost/pytorchjob-kit-e2e/broken:1", "--quiet")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"error: building localhost/pytorchjob-kit-e2e/broken:1 from {tmp_path / 'Dockerfile'} failed" in proc.stderr
    assert f"fix {tmp_path / 'Dockerfile'} (or what it needs) and run again" in proc.stderr
    proc = generator("image", "load", "localhost/pytorchjob-kit-e2e/never-built:1")
    assert proc.returncode == 1 and ("error: localhost/pytorchjob-kit-e2e/never-built:1: no such image in the "
                                     "podman store, and no such file; build it first") in proc.stderr


def test_convert_writes_the_torchrun_command_from_an_image_that_holds_its_entrypoint(engine, registry, tmp_path):
    """A job that leaves `command` empty, as four of the six real-world references do, converts
    once its image is in the registry: the command is read from the image and starts through torchrun."""
    import yaml

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    (project / "Dockerfile").write_text('ARG BASE=python:3.11-slim\nFROM ${BASE}\nCOPY train.py /workspace/\n'
                                        'ENTRYPOINT ["python", "/workspace/train.py"]\nCMD ["--epochs", "3"]\n')
    image = f"registry.example.com/ml/entrypoint-{os.getpid()}:1"
    container = {"name": "pytorch", "image": image}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "from-image"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure",
                                                       "template": {"spec": {"containers": [container]}}}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    refused = generator("convert", str(tmp_path / "job.yaml"), "--to", "v2")
    assert refused.returncode == 1 and "`python -m generator image load IMAGE`" in refused.stderr

    assert generator("image", "build", str(project), "-t", image, "--quiet").returncode == 0
    assert generator("image", "load", image).returncode == 0
    proc = generator("convert", str(tmp_path / "job.yaml"), "--to", "v2", "--accept", "-o", str(tmp_path / "v2.yaml"))
    assert proc.returncode == 0, proc.stderr
    trainjob = next(d for d in yaml.safe_load_all((tmp_path / "v2.yaml").read_text()) if d["kind"] == "TrainJob")
    assert trainjob["spec"]["trainer"]["command"] == ["torchrun", "/workspace/train.py", "--epochs", "3"]
    assert f"the command, python /workspace/train.py --epochs 3, is {image}'s own ENTRYPOINT and CMD" in proc.stdout
    engine.run("rmi", image)
    forget(registry, image)


def containers_left(engine, job: str) -> list[str]:
    """The job's containers and network that still exist after its run."""
    names = engine.run("ps", "-a", "--format", "{{.Names}}").stdout.split()
    networks = engine.run("network", "ls", "--format", "{{.Name}}").stdout.split()
    return [n for n in names if n.startswith(f"{job}-")] + [n for n in networks if n == job]


def test_the_demo_job_runs_as_containers_of_the_trainer_image_as_uid_1000(engine, trainer_image, tmp_path):
    """`make demo`'s values (1 Master + 2 Workers, the output claim on the Master), trimmed to one
    epoch, under `run --container`: each replica a container on the job's network, meeting the
    Master by its name, writing the model to the claim's folder as the pod's user."""
    job = f"demo-{os.getpid()}"
    values = tmp_path / "demo-values.yaml"
    made = generator("values", "--name", job, "--workers", "2", "--cpu", "1", "--memory", "1Gi", "--output-size", "1Gi",
                     "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1", "-o", str(values))
    assert made.returncode == 0, made.stderr
    proc = generator("run", str(values), "--container", "--run-dir", str(tmp_path / "run"), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"as containers on network {job}" in proc.stderr and "job succeeded: the Master succeeded" in proc.stderr
    assert "master-0 | epoch 1/1: test accuracy" in proc.stdout  # the replicas' logs, prefixed as `run` prefixes them
    output = tmp_path / "run" / f"{job}-output"
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["world_size"] == 3 and metrics["final_accuracy"] > 0.5
    assert (output / "mnist_cnn.pt").stat().st_uid == 1000 and (output / "metrics.json").stat().st_uid == 1000
    assert containers_left(engine, job) == []


def test_a_trainjob_runs_as_containers_of_nodes_that_meet_under_the_jobs_service(engine, trainer_image, tmp_path):
    job = f"digits-v2-{os.getpid()}"
    values = tmp_path / "v2.yaml"
    made = generator("values", "--target", "v2", "--name", job, "--workers", "1", "--cpu", "1", "--memory", "1Gi",
                     "--output-size", "1Gi", "--arg=--dataset=digits", "--arg=--epochs=1", "--arg=--threads=1",
                     "-o", str(values))
    assert made.returncode == 0, made.stderr
    proc = generator("run", str(values), "--container", "--run-dir", str(tmp_path / "run"), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "job succeeded: every node succeeded" in proc.stderr and "node-0-0 | epoch 1/1" in proc.stdout
    metrics = json.loads((tmp_path / "run" / f"{job}-output" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["final_accuracy"] > 0.5
    assert containers_left(engine, job) == []


def test_run_container_names_an_image_the_store_lacks_and_how_to_get_it(engine, tmp_path):
    import yaml

    image = "localhost/pytorchjob-kit-e2e/never-built:1"
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": f"absent-{os.getpid()}"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
                "spec": {"containers": [{"name": "pytorch", "image": image, "command": ["python", "train.py"]}]}}}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
    proc = generator("run", str(tmp_path / "job.yaml"), "--container", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (f"error: image {image} (master-0) is not in podman's local store: build yours with `python -m generator "
            f"image build DIR -t {image}`") in proc.stderr
    assert containers_left(engine, body["metadata"]["name"]) == []
    # A dry run shows each replica's command all the same, and says what is missing.
    dry = generator("run", str(tmp_path / "job.yaml"), "--container", "--dry-run")
    assert dry.returncode == 0 and f"note: image {image} (master-0) is not in podman's local store" in dry.stderr
    assert f"  master-0: podman run --rm --name {body['metadata']['name']}-master-0 " in dry.stdout
    assert dry.stdout.rstrip().endswith(f"--entrypoint '[\"python\", \"train.py\"]' {image}")


def start_holding_job(tmp_path, job: str) -> subprocess.Popen:
    """`run --container` of a job of any image (alpine's shell) whose two replicas wait until told to
    stop, returned once both say they are ready, each on its pod's hostname."""
    import yaml

    hold = ["sh", "-c", "trap 'echo stopped by SIGTERM; exit 0' TERM; echo ready on $(hostname); sleep 600 & wait"]
    container = {"name": "pytorch", "image": "docker.io/library/alpine:3.10", "command": hold}
    spec = {"restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": job},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, **spec}, "Worker": {"replicas": 1, **spec}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
    proc = subprocess.Popen([sys.executable, "-m", "generator", "run", str(tmp_path / "job.yaml"), "--container",
                             "--run-dir", str(tmp_path / "run")], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = set()
    for line in proc.stdout:
        if "| ready on" in line:
            ready.add(line.split(" | ")[1].strip())
        if len(ready) == 2:
            break
    assert ready == {f"ready on {job}-master-0", f"ready on {job}-worker-0"}
    return proc


def test_ctrl_c_stops_the_containers_and_removes_them_and_the_network(engine, registry, tmp_path):
    """Ctrl-C stops the replicas through the engine (SIGTERM, as a kubelet sends it), and nothing of
    the job is left."""
    import signal

    job = f"ctrl-c-{os.getpid()}"
    proc = start_holding_job(tmp_path, job)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "master-0 | stopped by SIGTERM" in out and "job failed: stopped by SIGINT" in err
    assert containers_left(engine, job) == []


def test_a_run_killed_with_sigkill_leaves_no_container_or_network_behind(engine, registry, tmp_path):
    from tests.support.waiting import wait_for

    job = f"killed-{os.getpid()}"
    proc = start_holding_job(tmp_path, job)
    proc.kill()
    proc.communicate(timeout=60)
    wait_for(lambda: containers_left(engine, job) == [], 60, f"{job}'s containers and network to be removed")


def test_a_failed_container_restarts_under_its_restart_policy_and_the_job_succeeds(engine, registry, tmp_path):
    """The process runner's rules with containers: the Master exits 3 once (a fresh container each
    start, its claim kept), OnFailure starts it again under the same name, and its success ends the job."""
    import yaml

    job = f"restart-{os.getpid()}"
    once = ["sh", "-c", "if [ -f /data/failed ]; then echo second start; exit 0; fi; touch /data/failed; exit 3"]
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": job},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {
                "containers": [{"name": "pytorch", "image": "docker.io/library/alpine:3.10", "command": once,
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
    proc = generator("run", str(tmp_path / "job.yaml"), "--container", "--run-dir", str(tmp_path / "run"), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "master-0 | exited with code 3; restarting (restartPolicy OnFailure, restart 1)" in proc.stdout
    assert "master-0 | second start" in proc.stdout
    assert re.search(r"^master-0\s+Succeeded\s+1\s+0\s", proc.stderr, re.M), proc.stderr
    assert containers_left(engine, job) == []
