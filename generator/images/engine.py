"""The engine that builds and runs images: Docker where its engine answers, else podman (installed
from Debian's packages when missing). podman runs with a containers.conf of the project's, which
says once what this kind of machine needs of every container:

- runc, not crun: crun refuses a machine whose cgroups are hybrid ("cgroups in hybrid mode not
  supported");
- ulimits no higher than this process's hard limits: podman's defaults are above them, and root
  without CAP_SYS_RESOURCE cannot raise a hard limit (`setrlimit RLIMIT_NOFILE: Operation not
  permitted`)."""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from generator import debian, paths
from generator.errors import UserError

DOCKER = "docker"
PODMAN = "podman"
# The Debian package that brings each program this package runs.
PACKAGES = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap", "skopeo": "skopeo",
            "busybox": "busybox-static", "dash": "dash",
            "nslookup": "bind9-dnsutils"}


def folder() -> Path:
    """This package's part of the user's cache (0700: build records and podman's settings)."""
    path = paths.cache_dir() / "images"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def install(programs: list[str], say=print) -> None:
    """Install from Debian's packages each of `programs` not on PATH; as root, saying so."""
    missing = [p for p in programs if not shutil.which(p)]
    if not missing:
        return
    packages = sorted({PACKAGES[p] for p in missing})
    listing = " ".join(packages)
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        why = "not root" if os.geteuid() != 0 else "no apt-get on this machine"
        raise UserError(f"building images here needs {', '.join(missing)}, which are missing, and they cannot be "
                        f"installed from Debian's packages ({why}); install {listing} (Debian: `sudo apt-get install "
                        f"{listing}`), or run where a Docker engine answers")
    say(f"installing {listing} from Debian's packages (apt-get update, then apt-get install; as root)")
    failed = debian.install(packages)
    if failed:
        raise UserError(f"{failed}\ninstall {listing} yourself and run again")
    still = [p for p in missing if not shutil.which(p)]
    if still:
        raise UserError(f"apt-get installed {listing}, yet {', '.join(still)} is not on PATH ({os.environ.get('PATH')})")


def docker_answers() -> bool:
    """Whether a Docker engine answers here (a docker client alone is not one)."""
    if not shutil.which(DOCKER):
        return False
    try:
        proc = subprocess.run([DOCKER, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True,
                              timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


# Processes a container may start: runc was refused (EPERM) the machine's own hard limit of processes
# here (96365), while this many, far more than a training container starts, is always granted.
NPROC = 32768


def ulimits() -> dict[str, str]:
    """The ulimits every container gets: open files up to this process's own hard limit, which it
    may always keep, and processes up to NPROC."""
    out = {}
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nofile != resource.RLIM_INFINITY:
        out["nofile"] = f"{nofile}:{nofile}"
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = NPROC if nproc == resource.RLIM_INFINITY else min(nproc, NPROC)
    out["nproc"] = f"{nproc}:{nproc}"
    return out


def containers_conf() -> str:
    """The machine's containers.conf settings with ours over them (conf.py)."""
    from generator.images import conf

    return conf.text({"containers": {"default_ulimits": [f"{name}={value}" for name, value in ulimits().items()]},
                      "engine": {"runtime": "runc"}})


@dataclass(frozen=True)
class Engine:
    name: str  # docker or podman
    env: dict[str, str] = field(default_factory=dict)  # added to os.environ for every call

    @property
    def transport(self) -> str:
        """Where skopeo finds this engine's local images."""
        return "docker-daemon:" if self.name == DOCKER else "containers-storage:"

    def argv(self, *args: str) -> list[str]:
        return [self.name, *args]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *args: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(*args), env=self.environ(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
            raise UserError(f"`{self.name} {' '.join(args[:3])} ...` failed:\n{tail}")
        return proc

    def image_id(self, ref: str) -> str | None:
        """The local image `ref`'s ID, None when the local store lacks it."""
        proc = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return proc.stdout.strip().removeprefix("sha256:") or None if proc.returncode == 0 else None

    def build_flags(self) -> list[str]:
        """What a build needs on this kind of machine, beyond the Dockerfile's own arguments."""
        if self.name == DOCKER:
            return []
        # Builds reach the package indexes as this machine does: its network and its CA bundle
        # (which a TLS-inspecting proxy's CA may be in), mounted read-only where Debian keeps it.
        flags = ["--network", "host"]
        bundle = ca_bundle()
        if bundle:
            flags += ["--volume", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro"]
        return flags


def ca_bundle() -> str | None:
    import ssl

    for candidate in (os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile,
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return str(Path(candidate).resolve())
    return None


def get(say=print) -> Engine:
    """Docker where its engine answers, else podman with this project's containers.conf."""
    if docker_answers():
        return Engine(DOCKER)
    install(["podman", "runc"], say)
    conf = folder() / "containers.conf"
    text = containers_conf()
    if not conf.is_file() or conf.read_text() != text:
        conf.write_text(text)
    return Engine(PODMAN, {"CONTAINERS_CONF": str(conf)})


def stream(argv: list[str], what: str, fix: str, env: dict[str, str] | None = None, show=None, nice: bool = True) -> None:
    """Run a long build step, passing each line of its output to `show` (None: keep quiet); on a
    failure the error names `what` failed, with its last lines and `fix`. Long CPU-bound steps run
    at a lower priority, so that the rest of the machine's work keeps its share."""
    if nice and shutil.which("nice"):
        argv = ["nice", "-n", "10", *argv]
    tail: list[str] = []
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL) as proc:
        for line in proc.stdout:
            tail = [*tail[-24:], line.rstrip()]
            if show:
                show(line.rstrip())
    if proc.returncode:
        raise UserError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail) + f"\n{fix}")
