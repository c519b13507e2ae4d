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

from tests.support import ROOT, procfs

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
            "ghcr.io/pytorchjob-kit/trainer:0.1.0-cuda",
            "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"} <= set(named)  # in Trainer's runtimes installer
    assert any(n.startswith("ghcr.io/kubeflow/trainer/trainer-controller-manager:") for n in named)
    assert any("/jobset/jobset:" in n for n in named)
    assert any("/kueue/kueue:" in n for n in named)  # the chart `cluster up --kueue` installs
    assert set(named) <= set(registry.catalog())


def test_the_registry_holds_both_charts_and_helm_shows_their_values_from_it_as_written(registry):
    """As a user reads a chart's values in their registry: `helm show values oci://... --version V`
    with the registry's client certificate (after any `Pulled:` and `Digest:` lines helm writes first)."""
    from generator.controlplane import build, oci_charts, pins

    for chart in oci_charts.CHARTS:
        assert registry.has(oci_charts.name(chart)), oci_charts.name(chart)
        held = oci_charts.source(registry, chart)
        shown = subprocess.run([str(build.binary(pins.HELM_BINARY)), "show", "values", held.ref, *held.flags],
                               env=oci_charts.helm_env(registry), capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.endswith((chart / "values.yaml").read_text() + "\n")


def test_the_registry_listens_on_loopback_and_answers_only_its_own_client(registry):
    host, port = registry.address.split(":")
    assert host == "127.0.0.1"
    assert procfs.listening_addresses(int(port)) == ["0100007F:" + f"{int(port):04X}"]
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
    ("us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:release-0.19", ["--help"], "65532:65532",
     "-feature-gates"),
    # busybox's applets, but sh (dash) and nslookup (BIND's): the operator's Workers wait with `nslookup`;
    # Trainer's runtimes installer runs `apk add --no-cache kubectl`, then kubectl.
    ("docker.io/library/alpine:3.10", ["sh", "-c", "apk add --no-cache kubectl && readlink /bin/nslookup && readlink /bin/sleep && "
                                                   "kubectl version --client"], "",
     "OK: kubectl already here (no network to install from)\n/usr/bin/nslookup\n/bin/busybox\nClient Version: v"),
    ("docker.io/curlimages/curl:8.10.1", ["--version"], "100:101", "Protocols:"),
    # Trainer's torch-distributed runtime: the SDK's `bash -c` writes a function to the working folder and runs it.
    ("docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
     ["bash", "-c", "pwd && id -u && touch f.py && torchrun --help >/dev/null && python -c 'import torch; print(torch.__version__)'"],
     "1000:1000", "/workspace\n1000\n2.13.0"),
], ids=["training-operator", "trainer-controller", "jobset", "kueue", "alpine", "curl", "torch"])
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
    # A change rebuilds it, and the image the tag named before is removed, not left untagged in the store.
    before = engine.image_id(tag)
    (project / "train.py").write_text("print('trained by my own image')  # changed\n")
    rebuilt = generator("image", "build", str(project), "-t", tag, "--quiet")
    assert rebuilt.stdout == f"built: {tag}\n", rebuilt.stderr
    assert engine.image_id(tag) != before and engine.image_id(before) is None
    (project / "train.py").write_text("print('trained by my own image')\n")
    assert generator("image", "build", str(project), "-t", tag, "--quiet").returncode == 0
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


def small_image(engine, tmp_path, name: str, workdir: str, user: str, folder_mode: int | None = None) -> str:
    """An image of one file with its ENTRYPOINT, CMD, WORKDIR and USER, made in a second (`podman
    import` of a tar with the config's changes), in the engine's store as `name`; with
    `folder_mode`, its layer holds the WORKDIR with that mode, owned by USER."""
    import io
    import tarfile

    rootfs = tmp_path / f"rootfs-{folder_mode}.tar"
    with tarfile.open(rootfs, "w") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("workspace/train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        if folder_mode is not None:
            folder = tarfile.TarInfo(workdir.strip("/"))
            folder.type, folder.mode = tarfile.DIRTYPE, folder_mode
            folder.uid, folder.gid = (int(n) for n in user.split(":"))
            tar.addfile(folder)
    engine.run("import", "--change", 'ENTRYPOINT ["python", "/workspace/train.py"]', "--change", 'CMD ["--epochs", "3"]',
               "--change", f"WORKDIR {workdir}", "--change", f"USER {user}", str(rootfs), name)
    return name


def job_file(tmp_path, image: str, run_as: int | None = None) -> str:
    import yaml

    pod = {"containers": [{"name": "pytorch", "image": image}]}
    if run_as is not None:
        pod["securityContext"] = {"runAsUser": run_as}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "from-image"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure",
                                                       "template": {"spec": pod}}}}}
    path = tmp_path / f"job-{run_as}.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def test_import_writes_the_command_an_image_holds(engine, registry, tmp_path):
    """What the image runs, read from the registry on this machine: import writes it out as the
    command (ENTRYPOINT then CMD), so the values say what runs."""
    import yaml

    image = small_image(engine, tmp_path, f"registry.example.com/ml/home-{os.getpid()}:1", "/home/app", "1000:1000")
    try:
        assert generator("image", "load", image).returncode == 0
        proc = generator("import", job_file(tmp_path, image))
        assert proc.returncode == 0, proc.stderr
        values = yaml.safe_load(proc.stdout)
        assert values["command"] == ["python", "/workspace/train.py", "--epochs", "3"] and "args" not in values
        assert (f"note: command: python /workspace/train.py --epochs 3 written out, {image}'s own ENTRYPOINT and CMD, "
                "read from the registry on this machine") in proc.stderr
    finally:
        engine.run("rmi", image, check=False)
        forget(registry, image)


@pytest.mark.parametrize("mode, said", [
    (0o700, "runs the pod as uid 2000, which cannot enter {image}'s WORKDIR /home/app (mode 0700, owner 1000:1000, as "
            "the image's layers hold it): what the command reads there is refused (Permission denied) (got 2000); run "
            "as uid 1000, or set the container's workingDir to a folder uid 2000 can enter"),
    (0o755, None),
    (None, "runs the pod as uid 2000, but {image} was built to run as user 1000:1000 and starts in its WORKDIR "
           "/home/app, which uid 2000 may not be able to enter (the layers that hold it are too large to read here"),
], ids=["closed folder", "open folder", "folder not in its layers"])
def test_validate_warns_when_run_as_user_cannot_enter_the_images_workdir(engine, registry, tmp_path, mode, said):
    """The pod's runAsUser against the image's WORKDIR: for sure where the image's small top layers
    hold the folder, else from its USER, and said to be a guess."""
    image = small_image(engine, tmp_path, f"registry.example.com/ml/home-{os.getpid()}:{mode}", "/home/app",
                        "1000:1000", mode)
    try:
        assert generator("image", "load", image).returncode == 0
        proc = generator("validate", job_file(tmp_path, image, run_as=2000))
        assert proc.returncode == 0 and proc.stdout.endswith(": valid\n"), proc.stderr
        if said:
            assert ("warning: spec.pytorchReplicaSpecs.Master.template.spec.securityContext.runAsUser: "
                    + said.format(image=image)) in proc.stderr, proc.stderr
        else:
            assert "warning" not in proc.stderr, proc.stderr
        same = generator("validate", job_file(tmp_path, image, run_as=1000))  # the folder's owner
        assert same.returncode == 0 and "warning" not in same.stderr, same.stderr
    finally:
        engine.run("rmi", image, check=False)
        forget(registry, image)


def private_registry_config(folder, ca, port: int, auth: dict) -> str:
    from generator.controlplane import pki

    crt, key = pki.Authority(ca).issue("server", "private-registry", server=True, names=["localhost"], ips=["127.0.0.1"])
    config = {"version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
              "storage": {"filesystem": {"rootdirectory": str(folder / "storage")}},
              "http": {"addr": f"127.0.0.1:{port}", "secret": "test", "tls": {"certificate": str(crt), "key": str(key)}},
              **({"auth": auth} if auth else {})}
    path = folder / f"config-{port}.yml"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture
def private_registry(engine, registry, tmp_path):
    """The project's registry binary as someone's private registry: HTTPS with a CA of the test's
    own (the reader trusts it through SSL_CERT_FILE, as Python's TLS reads it), holding ml/app:1, made
    by `start(auth)` with the given `auth` configuration, on a port of its own each time."""
    from generator.container import ports
    from generator.controlplane import build, pins

    binary = build.ensure(lambda line: None, groups=["registry"])[pins.REGISTRY_BINARY]
    started = []

    def start(auth: dict) -> str:
        port = ports.free_port()
        proc = subprocess.Popen([str(binary), "serve", private_registry_config(tmp_path, tmp_path / "ca", port, auth)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ,
                                                                                           "OTEL_TRACES_EXPORTER": "none"})
        started.append(proc)
        for _ in range(100):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return f"127.0.0.1:{port}"
            assert proc.poll() is None, "the private registry exited"
            import time

            time.sleep(0.1)
        raise AssertionError("the private registry did not listen")

    local = small_image(engine, tmp_path, f"localhost/pytorchjob-kit-e2e/private-{os.getpid()}:1", "/workspace", "1000")
    address = start({})
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "ca.crt").write_bytes((tmp_path / "ca" / "ca.crt").read_bytes())
    engine_run = subprocess.run(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(certs),
                                 f"{engine.transport}{local}", f"docker://{address}/ml/app:1"],
                                env=engine.environ(), capture_output=True, text=True, timeout=120)
    assert engine_run.returncode == 0, engine_run.stderr
    started.pop().terminate()
    engine.run("rmi", local, check=False)
    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=15)


def convert_from(tmp_path, address: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", "convert", job_file(tmp_path, f"{address}/ml/app:1"),
                           "--to", "v2", "--accept", *extra], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "SSL_CERT_FILE": str(tmp_path / "ca" / "ca.crt")})


def docker_config(tmp_path, address: str, login: str) -> str:
    import base64

    path = tmp_path / f"config-{len(login)}.json"
    path.write_text(json.dumps({"auths": {address: {"auth": base64.b64encode(login.encode()).decode()}}}))
    return str(path)


def test_a_private_registry_with_a_login_is_read_with_the_logins_of_registry_config(private_registry, tmp_path):
    """Basic auth (htpasswd), as a private registry often asks: refused without a login and with a
    wrong one, each named with the fix; read with the right one from --registry-config."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # the C library's bcrypt: distribution's htpasswd takes $2b$ hashes

    (tmp_path / "htpasswd").write_text(f"ml:{crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH))}\n")
    address = private_registry({"htpasswd": {"realm": "private", "path": str(tmp_path / "htpasswd")}})
    anonymous = convert_from(tmp_path, address)
    assert anonymous.returncode == 1
    assert (f"{address}/ml/app:1: {address} asks for a login; give "
            "--registry-config FILE, the config.json `docker login` writes (~/.docker/config.json), with a login for "
            f"{address}") in anonymous.stderr, anonymous.stderr
    wrong = convert_from(tmp_path, address, "--registry-config", docker_config(tmp_path, address, "ml:wrong"))
    assert wrong.returncode == 1 and f"{address} refused the login given for it" in wrong.stderr, wrong.stderr
    right = convert_from(tmp_path, address, "--registry-config", docker_config(tmp_path, address, "ml:s3cret"))
    assert right.returncode == 0, right.stderr
    assert "every node runs: torchrun /workspace/train.py --epochs 3" in right.stderr
    assert (f"note: the command, python /workspace/train.py --epochs 3, is {address}/ml/app:1's own ENTRYPOINT and "
            f"CMD, read from {address}") in right.stderr


@pytest.fixture
def token_service(tmp_path):
    """A token service as the registry v2 token spec has one (Harbor's, docker_auth's): it takes a
    login by Basic auth and answers a JWT for the asked scope, ES256-signed by a key whose
    certificate (x5c) chains to the CA the real registry is told to trust. None exists as a package
    here, so the test serves one; the registry that verifies its tokens is the real one."""
    import base64
    import http.server
    import threading
    import time
    import urllib.parse

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, utils

    from generator.controlplane import pki

    ca = pki.Authority(tmp_path / "ca")
    signer_crt, signer_key = ca.issue("token-signer", "token-signer")
    key = serialization.load_pem_private_key(signer_key.read_bytes(), None)
    chain = [base64.b64encode(x509.load_pem_x509_certificate(signer_crt.read_bytes())
                              .public_bytes(serialization.Encoding.DER)).decode()]
    server_crt, server_key = ca.issue("token-server", "token-server", server=True, names=["localhost"], ips=["127.0.0.1"])
    asked = []

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            asked.append(query)
            login = base64.b64encode(b"ml:s3cret").decode()
            if self.headers.get("Authorization") != f"Basic {login}":
                self.send_response(401)
                self.end_headers()
                return
            _, name, actions = query["scope"].split(":")
            now = int(time.time())
            claims = {"iss": "test-issuer", "sub": "ml", "aud": query["service"], "exp": now + 300, "nbf": now - 10,
                      "iat": now, "jti": str(now), "access": [{"type": "repository", "name": name,
                                                                "actions": actions.split(",")}]}
            signing = (b64(json.dumps({"typ": "JWT", "alg": "ES256", "x5c": chain}).encode()) + "." +
                       b64(json.dumps(claims).encode()))
            r, s = utils.decode_dss_signature(key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
            body = json.dumps({"token": f"{signing}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_crt, server_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"realm": f"https://127.0.0.1:{server.server_address[1]}/token", "service": "private-registry",
           "issuer": "test-issuer", "rootcertbundle": str(ca.cert_path)}, asked
    server.shutdown()


def test_a_registry_behind_a_token_service_is_read_through_the_token_flow(private_registry, token_service, tmp_path):
    """The registry v2 token flow, as ghcr.io and Docker Hub ask for it: the registry's 401 names a
    realm; the token for the repository's pull scope comes from there with the login, and the
    registry takes it."""
    auth, asked = token_service
    address = private_registry({"token": auth})
    anonymous = convert_from(tmp_path, address)
    assert anonymous.returncode == 1
    assert (f"{address}'s token service ({auth['realm']}) refused an anonymous pull (HTTP 401); give --registry-config "
            "FILE") in anonymous.stderr, anonymous.stderr
    right = convert_from(tmp_path, address, "--registry-config", docker_config(tmp_path, address, "ml:s3cret"))
    assert right.returncode == 0, right.stderr
    assert f"ENTRYPOINT and CMD, read from {address}" in right.stderr
    assert asked[-1] == {"service": "private-registry", "scope": "repository:ml/app:pull"}


def test_the_readmes_image_config_sample_is_what_the_commands_print(engine, registry, tmp_path):
    """The README's import and validate of a job that leaves its command to its image, run as
    written on the Dockerfile and job its prose describes."""
    import shlex

    import yaml

    from tests.support import docs, samples

    block = docs.block("generator.md", "The generator", fence="text", after="For an `app/Dockerfile` that makes its user")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "train.py").write_text("print('hi')\n")
    (tmp_path / "app" / "Dockerfile").write_text(
        'ARG BASE=python:3.11-slim\nFROM ${BASE}\nRUN useradd --uid 1000 --create-home app\nRUN chmod 700 /home/app\n'
        'WORKDIR /home/app\nCOPY train.py ./\nUSER 1000:1000\nENTRYPOINT ["python", "train.py"]\nCMD ["--epochs", "3"]\n')
    job = yaml.safe_load(open(job_file(tmp_path, "registry.example.com/ml/app:1", run_as=2000)))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    image = "registry.example.com/ml/app:1"
    engine.run("rmi", image, check=False)
    try:
        for step in block.split("$ ")[1:]:
            line, _, sample = step.partition("\n")
            argv = shlex.split(line.split(" > ")[0])
            assert argv[:3] == ["python", "-m", "generator"]
            proc = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                                  timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert proc.returncode == 0, proc.stderr
            printed = "" if " > /dev/null" in line else proc.stderr + proc.stdout
            if "--quiet" in line:
                printed = proc.stdout
            assert samples.mismatch(sample, printed) == "" if sample else printed == "", (line, printed)
    finally:
        engine.run("rmi", image, check=False)
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
    made = generator("values", "--name", job, "--workers", "2", "--cpu", "500m", "--memory", "1Gi", "--output-size", "1Gi",
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


def test_your_code_laid_over_the_jobs_image_runs_as_containers_and_is_rebuilt_only_when_it_changes(engine, trainer_image,
                                                                                                   tmp_path):
    """--image REPO=DIR under --container: tests/userproject's PyTorchJob (1 Master + 2 Workers) on a
    base image that holds Python and torch but not the code (the trainer's, named as the user's
    toy image), with the folder laid over it at /workspace in a thin layer built here."""
    import shutil

    base = f"localhost/pytorchjob-kit-e2e/toy-{os.getpid()}"
    code = tmp_path / "code"
    shutil.copytree(ROOT / "tests" / "userproject", code, ignore=shutil.ignore_patterns("__pycache__"))
    job = (code / "pytorchjob.yaml").read_text().replace("registry.example.com/ml/toy:1.0", f"{base}:1.0")
    (tmp_path / "job.yaml").write_text(job.replace("name: toy\n", f"name: toy-{os.getpid()}\n"))
    engine.run("tag", trainer_image, f"{base}:1.0")
    layers = []
    try:
        argv = ("run", str(tmp_path / "job.yaml"), "--container", "--image", f"{base}={code}", "--run-dir",
                str(tmp_path / "run"))
        proc = generator(*argv, timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        said = re.search(rf"note: {base}:1.0 runs as (\S+): {code} laid over it at /workspace", proc.stderr)
        assert said, proc.stderr
        layers.append(said.group(1))
        assert "job succeeded: the Master succeeded" in proc.stderr
        result = json.loads(next((tmp_path / "run").rglob("result.json")).read_text())
        assert result["world_size"] == 3, result
        assert containers_left(engine, f"toy-{os.getpid()}") == []
        # Built once: the same folder again is the same layer; a changed file builds it anew.
        again = generator(*argv[:5], "--dry-run")
        assert again.returncode == 0 and "laid over it" not in again.stderr and f" {layers[0]}" in again.stdout
        (code / "train.py").write_text((code / "train.py").read_text() + "\n# changed\n")
        changed = generator(*argv[:5], "--dry-run")
        assert changed.returncode == 0 and f"note: {base}:1.0 runs as {layers[0]}: {code} laid over" in changed.stderr
    finally:
        engine.run("rmi", *layers, f"{base}:1.0", check=False)


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


def test_the_read_only_twin_starts_and_stops_with_the_registry(tmp_path, registry):
    """A registry of the test's own (the real binary, its own folder and ports): the read-only twin
    starts with it on a port and CA of its own, answers its own client, and is started alone at the
    next start when only it stopped; both stop together."""
    from generator.controlplane import registry as registry_
    from generator.images.registry import Registry

    reg = Registry(tmp_path / "registry")
    said = []
    try:
        assert registry_.start(reg, say=said.append) == reg
        assert reg.pid() and reg.readonly.pid() and reg.address != reg.readonly.address
        assert reg.readonly.request("/v2/")[0] == 200  # its own client, its own CA
        assert [line.split(" serving")[0] for line in said] == ["registry", "read-only registry (the nodes' pulls)"]
        first = reg.pid()
        twin = registry_._stop_one(reg.readonly)
        registry_.start(reg, say=said.append)
        assert reg.pid() == first and reg.readonly.pid() not in (None, twin)
    finally:
        pids = registry_.stop(reg)
    assert len(pids) == 2 and not reg.pid() and not reg.readonly.pid()
    assert registry_.stop(reg) == []
