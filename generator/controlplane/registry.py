"""A real OCI registry on this machine (distribution's `registry`, built from the Go module proxy
with the control plane), one per user and machine, that holds the trainer's image and every
image the charts name, each under its full upstream name (`ghcr.io/kubeflow/...`,
`docker.io/library/alpine:3.10`), so a mirror of those registries can point at it unchanged.

The machine is shared, so the registry listens on loopback alone and answers only TLS clients
that present its client certificate (mutual TLS, as etcd here): another user of the machine can
connect, but reads nothing. Its folder in the user's cache (0700) holds the storage, the keys
and the log. It is started by `cluster up` and by `generator image registry up`, and outlives
clusters (two clusters side by side share it); `image registry down` stops it.

distribution has no per-certificate rights, so the nodes pull from a second registry process
over the same storage, in distribution's read-only mode, with a CA and one client of its own
(in the first's folder, under readonly/): a cluster's folder then holds a key that reads images
and can neither push nor delete, at either registry. The two start and stop together."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
from pathlib import Path

from generator import files
from generator.container import ports
from generator.controlplane import build, pins, pki, processes
from generator.controlplane.layout import MARKER
from generator.errors import UserError
from generator.images.registry import Registry, default


def _files(reg: Registry) -> None:
    """The folder (0700), the certificates, and the registry's configuration for a free port.
    Each of the two registries has a CA of its own, which signs its server and its one client: a
    client of one is refused by the other at the TLS handshake."""
    reg.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    reg.root.chmod(0o700)
    ca = pki.Authority(reg.pki, name=CA_NAMES[reg.writable])
    server_crt, server_key = ca.issue("server", "pytorchjob-kit-registry", server=True, names=["localhost"],
                                      ips=["127.0.0.1"])
    client_crt, client_key = ca.issue("client", CLIENT_NAMES[reg.writable])
    reg.certs.mkdir(exist_ok=True, mode=0o700)
    for source, target in ((ca.cert_path, "ca.crt"), (client_crt, "client.cert"), (client_key, "client.key")):
        fd = os.open(reg.certs / target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(source.read_bytes())
    previous = reg.read_state().get("port")
    port = previous if previous and _free(previous) else ports.free_port()
    secret = reg.read_state().get("secret") or secrets.token_hex(32)
    config = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(reg.storage)}, **_storage_policy(reg)},
        "http": {"addr": f"127.0.0.1:{port}", "secret": secret, "draintimeout": "5s",
                 "tls": {"certificate": str(server_crt), "key": str(server_key), "clientcas": [str(ca.cert_path)],
                         "clientauth": "require-and-verify-client-cert"}},
    }
    fd = os.open(reg.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)  # it holds the secret
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)
        out.write(json.dumps(config, indent=2))  # YAML is a superset of JSON
    _save(reg, port=port, secret=secret, pid=None)


# By Registry.writable: a CA and a client name for each registry, so neither's certificates pass for the other's.
CA_NAMES = {True: "pytorchjob-kit-registry-ca", False: "pytorchjob-kit-registry-readonly-ca"}
CLIENT_NAMES = {True: "pytorchjob-kit-registry-client", False: "pytorchjob-kit-registry-puller"}


def _storage_policy(reg: Registry) -> dict:
    """The writable registry deletes (`image load` replaces, tests forget their images). The
    read-only one answers every write with 405 (distribution's maintenance mode), and leaves the
    purging of stale uploads to the writable one, so it never changes the storage at all."""
    if reg.writable:
        return {"delete": {"enabled": True}}
    return {"delete": {"enabled": False},
            "maintenance": {"readonly": {"enabled": True}, "uploadpurging": {"enabled": False}}}


def _free(port: int) -> bool:
    """Whether loopback's `port` can be taken (the registry keeps its port across restarts when it can)."""
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _save(reg: Registry, **fields) -> None:
    current = {**reg.read_state(), **fields}
    files.write_whole(reg.state, json.dumps(current), 0o600)


def start(reg: Registry | None = None, say=print) -> Registry:
    """The writable registry and its read-only twin running, each started now unless it runs
    already; the binary built first if missing. The writable one, which pushes go to."""
    import fcntl

    reg = reg or default()
    pair = (reg, reg.readonly)
    if all(r.pid() for r in pair):
        return reg
    binary = build.ensure(say, groups=["registry"])[pins.REGISTRY_BINARY]
    reg.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(reg.root / ".start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for one in pair:
            if not one.pid():
                _serve(one, binary, say)
    return reg


def _serve(reg: Registry, binary: Path, say) -> None:
    """Start one registry and wait until it answers its own client."""
    _files(reg)
    # Its own session, and none of a cluster's marker: `cluster down` stops what a cluster
    # started, and the registry serves every cluster of the machine.
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    env["OTEL_TRACES_EXPORTER"] = "none"  # else it sends traces to a collector on localhost:4318
    fd = os.open(reg.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen([str(binary), "serve", str(reg.config)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=reg.root, env=env)
    _save(reg, pid=proc.pid)
    port = reg.read_state()["port"]
    kind = "registry" if reg.writable else "read-only registry (the nodes' pulls)"
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if proc.poll() is not None:
            break
        try:
            if reg.request("/v2/", address=f"127.0.0.1:{port}")[0] == 200:
                say(f"{kind} serving on 127.0.0.1:{port} (mutual TLS; its client certificate in {reg.certs})")
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    proc.kill()
    tail = "\n".join(reg.log.read_text(errors="replace").strip().splitlines()[-10:])
    raise UserError(f"the {kind} did not start on 127.0.0.1:{port}:\n{tail}\nits log is {reg.log}")


def stop(reg: Registry | None = None) -> list[int]:
    """Stop the read-only registry, then the writable one; the process ids of those that ran.
    The storage stays."""
    reg = reg or default()
    return [pid for pid in (_stop_one(reg.readonly), _stop_one(reg)) if pid]


def _stop_one(reg: Registry) -> int | None:
    pid = reg.pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 15
        while processes.pid_alive(pid) and time.monotonic() < end:
            time.sleep(0.2)
        if processes.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    if reg.state.exists():
        _save(reg, pid=None)
    return pid


def _pushed(reg: Registry) -> dict[str, str]:
    """name -> what it was pushed from, for everything pushed into the registry here."""
    try:
        return json.loads((reg.root / "pushed.json").read_text())
    except (OSError, ValueError):
        return {}


def held_from(reg: Registry, name: str, source: str) -> bool:
    """Whether the registry holds `name` as pushed from `source` (an image's id, a chart's files'
    digest): nothing is pushed twice."""
    return _pushed(reg).get(name) == source and bool(reg.has(name))


def record(reg: Registry, name: str, source: str) -> None:
    """`name` was pushed from `source` just now."""
    pushed = {**_pushed(reg), name: source}
    files.write_whole(reg.root / "pushed.json", json.dumps(pushed, indent=1, sort_keys=True), 0o600)


def push(reg: Registry, eng, local: str, name: str, say=print) -> bool:
    """Copy the local image `local` into the registry as `name` (its upstream name, with tag),
    unless the registry holds it already as pushed from that image; True when it copied now."""
    from generator.images import engine as engine_

    image_id = eng.image_id(local)
    if not image_id:
        raise UserError(f"{local}: no such image in the {eng.name} store; build it first (`python -m generator image "
                        "build` for the trainer's)")
    if held_from(reg, name, image_id):
        return False
    say(f"pushing {local} to {reg.address}/{name}")
    engine_.stream(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(reg.certs), f"{eng.transport}{local}",
                    f"docker://{reg.address}/{name}"], f"pushing {local} to the registry at {reg.address}",
                   f"the registry's log is {reg.log}", env=eng.environ(), nice=False)
    record(reg, name, image_id)
    return True


def load_archive(reg: Registry, path: Path, source: str, name: str, say=print) -> str:
    """Put the archive at `path` into the registry as `name`, from skopeo's `source` for it, which
    images.archive.source checked (and unpacked); the name it is held under."""
    from generator.images import base
    from generator.images import engine as engine_

    target = base.qualified(name)
    say(f"pushing {path} to {reg.address}/{target}")
    engine_.stream(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(reg.certs), source,
                    f"docker://{reg.address}/{target}"], f"pushing {path} to the registry at {reg.address}",
                   f"the registry's log is {reg.log}", nice=False)
    return target


def load(reg: Registry, eng, image: str, name: str | None = None, say=print) -> str:
    """Put `image`, a name in the local store, into the registry, under `name` (default: the image's
    own name, Docker Hub's written out); the name it is held under."""
    from generator.images import base

    if not eng.image_id(image):
        raise UserError(f"{image}: no such image in the {eng.name} store, and no such file; build it first "
                        "(`python -m generator image build DIR -t NAME`), or give an archive file")
    target = base.qualified(name or image)
    push(reg, eng, image, target, say)
    return target
