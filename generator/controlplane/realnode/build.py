"""What the real node runs, built once per machine only when asked (`cluster build --node real`,
`cluster up --node real`): the kubelet of the control plane's Kubernetes release, containerd v2
with its runc shim and ctr, CoreDNS for the cluster's DNS, and the sandbox (pause) image. runc and the CNI plugins come from
Debian's packages. Each group lives in the user's cache beside the control plane's, in a folder
named for a hash of what it is built from, built under a lock and renamed into place whole, as
controlplane/build.py does for the control plane."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from generator import debian, paths
from generator.container import machine
from generator.controlplane import build
from generator.controlplane.realnode import oci
from generator.errors import UserError

CONTAINERD_MODULE_DIR = paths.go_module("containerd")
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_BINARIES = ["containerd", "containerd-shim-runc-v2", "ctr"]
# No cgo, so no btrfs, devmapper or zfs snapshotters: the node uses overlayfs.
CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs"
KUBELET = "kubelet"
# Services' ClusterIPs: kube-proxy of the same release, in the node's network namespace (realnode/proxy.py).
KUBE_PROXY = "kube-proxy"
# The cluster DNS: CoreDNS with the plugins its Corefile uses (controlplane/coredns/main.go).
COREDNS_MODULE_DIR = paths.go_module("coredns")
COREDNS_MODULE = "github.com/coredns/coredns"
COREDNS = "coredns"
# The sandbox image: kubernetes' own pause program (build/pause of the k8s.io/kubernetes module),
# FROM scratch, run as 65535 as upstream's image is.
PAUSE_TAG = "3.10.2"
PAUSE_IMAGE = f"localhost/pytorchjob-kit/pause:{PAUSE_TAG}"
PAUSE_ARCHIVE = "pause.oci.tar"
PAUSE_USER = "65535:65535"
# Debian's packages for what the node takes from the machine: runc (crun refuses hybrid cgroups),
# the CNI plugins the bridge network needs, and iptables for kube-proxy's Service rules.
RUNC_PATHS = [Path("/usr/sbin/runc"), Path("/usr/bin/runc")]
IPTABLES_PATHS = machine.IPTABLES_PATHS
CNI_DIRS = [Path("/usr/lib/cni"), Path("/opt/cni/bin")]
CNI_PLUGINS = ["bridge", "host-local", "loopback", "portmap"]
PACKAGES = ["runc", "containernetworking-plugins", "iptables"]


def containerd_version() -> str:
    return build.required(CONTAINERD_MODULE_DIR / "go.mod", CONTAINERD_MODULE)


def _module_text(folder: Path) -> str:
    return "\n".join([(folder / "go.mod").read_text(), (folder / "go.sum").read_text()])


def _kubernetes_stamp(command: str):
    return lambda: "\n".join([_module_text(build.GO_MODULE), build._ldflags(), f"k8s.io/kubernetes/cmd/{command}"])


def _containerd_stamp() -> str:
    return "\n".join([_module_text(CONTAINERD_MODULE_DIR), CONTAINERD_TAGS, "CGO_ENABLED=0"])


def _coredns_stamp() -> str:
    return "\n".join([_module_text(COREDNS_MODULE_DIR), (COREDNS_MODULE_DIR / "main.go").read_text(), "CGO_ENABLED=0"])


def _pause_stamp() -> str:
    # The packer's source is part of what the archive is made from.
    return "\n".join([build.kube_version(), PAUSE_TAG, PAUSE_IMAGE, PAUSE_USER, Path(oci.__file__).read_text()])


GROUPS = {
    "kubelet": ([KUBELET], _kubernetes_stamp(KUBELET)),
    "kube-proxy": ([KUBE_PROXY], _kubernetes_stamp(KUBE_PROXY)),
    "containerd": (CONTAINERD_BINARIES, _containerd_stamp),
    "coredns": ([COREDNS], _coredns_stamp),
    "pause": ([PAUSE_ARCHIVE], _pause_stamp),
}
FILES = [name for names, _ in GROUPS.values() for name in names]


def group_dir(group: str) -> Path:
    key = hashlib.sha256(GROUPS[group][1]().encode()).hexdigest()[:16]
    return paths.cache_dir() / "controlplane" / f"node-{group}-{key}"


def path(name: str) -> Path:
    """Where the built file `name` is (or will be once `ensure` has built it)."""
    return group_dir(next(g for g, (names, _) in GROUPS.items() if name in names)) / name


def _built(group: str) -> bool:
    folder = group_dir(group)
    return (folder / build.COMPLETE).is_file() and all((folder / n).is_file() for n in GROUPS[group][0])


def missing() -> list[str]:
    return [name for group in GROUPS if not _built(group) for name in GROUPS[group][0]]


def runc() -> Path | None:
    found = shutil.which("runc")
    return Path(found) if found else next((p for p in RUNC_PATHS if p.is_file()), None)


def iptables() -> Path | None:
    return machine.iptables()


def cni_dir() -> Path | None:
    return next((d for d in CNI_DIRS if all((d / p).is_file() for p in CNI_PLUGINS)), None)


def host_packages(say=print) -> tuple[Path, Path]:
    """runc and the CNI plugins' folder, installed from Debian's packages with iptables when any is
    missing (as root)."""
    if runc() and cni_dir() and iptables():
        return runc(), cni_dir()
    command = f"apt-get update && apt-get install -y {' '.join(PACKAGES)}"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise UserError(f"the node needs runc, iptables and the CNI plugins {', '.join(CNI_PLUGINS)} (in one of "
                        f"{', '.join(map(str, CNI_DIRS))}); install them as root: `{command}`")
    say(f"installing runc, iptables and the CNI plugins from Debian's packages, as root: {command}")
    failed = debian.install(PACKAGES)
    if failed:
        raise UserError(f"{failed}\ninstall {' and '.join(PACKAGES)} yourself")
    if not (runc() and cni_dir() and iptables()):
        raise UserError(f"{' and '.join(PACKAGES)} are installed but runc, iptables or the CNI plugins "
                        f"{', '.join(CNI_PLUGINS)} are not where the node looks "
                        f"({', '.join(map(str, RUNC_PATHS + IPTABLES_PATHS + CNI_DIRS))})")
    return runc(), cni_dir()


def ensure(say=print) -> dict[str, Path]:
    """Build what is missing (waiting on a lock per group for another process building it) and
    install runc, iptables and the CNI plugins when missing; return each built file's path."""
    host_packages(say)
    todo = [g for g in GROUPS if not _built(g)]
    if todo and not shutil.which("go"):
        raise UserError("the real node is built from Go modules and `go` is not on PATH; install Go 1.26 "
                        "(https://go.dev/dl/) and run again")
    if "pause" in todo and not shutil.which("gcc"):
        raise UserError("the real node's pause image is built with gcc -static, and `gcc` is not on PATH; install it "
                        "(`apt-get install -y gcc libc6-dev`) and run again")
    for group in todo:
        folder = group_dir(group)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _built(group):
                _build(group, folder, say)
    return {name: path(name) for name in FILES}


def _build(group: str, folder: Path, say) -> None:
    go = shutil.which("go")
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        if group in ("kubelet", "kube-proxy"):
            say(f"building the {group} from k8s.io/kubernetes {build.kube_version()} into {folder} (once per machine; "
                "under a minute after the control plane's build)")
            # In a copy of the control plane's module: the kubelet's packages add go.sum lines, which must not
            # change the module the control plane's binaries are keyed by (that would rebuild them all).
            module = staging / "module"
            module.mkdir()
            for name in ("go.mod", "go.sum"):
                shutil.copyfile(build.GO_MODULE / name, module / name)
            _go([go, "build", "-ldflags", build._ldflags(), "-o", str(staging) + "/",
                 f"k8s.io/kubernetes/cmd/{group}"], module, {**os.environ, "GOFLAGS": "-mod=mod"})
            shutil.rmtree(module)
        elif group == "containerd":
            say(f"building containerd, containerd-shim-runc-v2 and ctr from {CONTAINERD_MODULE}@{containerd_version()} "
                f"into {folder} (once per machine; about a minute on 2 cores)")
            _go([go, "build", "-tags", CONTAINERD_TAGS, "-o", str(staging) + "/",
                       *[f"{CONTAINERD_MODULE}/cmd/{c}" for c in CONTAINERD_BINARIES]], CONTAINERD_MODULE_DIR,
                      {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
        elif group == "coredns":
            say(f"building CoreDNS from {COREDNS_MODULE}@{build.required(COREDNS_MODULE_DIR / 'go.mod', COREDNS_MODULE)} "
                f"into {folder} (once per machine; about a minute on 2 cores)")
            _go([go, "build", "-trimpath", "-o", str(staging / COREDNS), "."], COREDNS_MODULE_DIR,
                {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
        else:
            say(f"building the sandbox image {PAUSE_IMAGE} (kubernetes' pause.c, gcc -static) into {folder}")
            _pause(staging)
        (staging / build.COMPLETE).write_text(GROUPS[group][1]())
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _yield() -> None:
    """The node's builds run at a lower priority: they share the machine's cores with everyone's work."""
    os.nice(10)


def _go(argv: list[str], cwd: Path, env: dict) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, preexec_fn=_yield)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise UserError(f"`{' '.join(argv[:3])} ...` failed in {cwd}:\n{tail}\nthe Go module proxy must be reachable "
                        "(GOPROXY) for the first build")


def _kubernetes_source() -> Path:
    """The k8s.io/kubernetes module's folder in the Go module cache (downloaded when absent)."""
    proc = subprocess.run([shutil.which("go"), "mod", "download", "-json", f"k8s.io/kubernetes@{build.kube_version()}"],
                          cwd=build.GO_MODULE, capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    try:
        return Path(json.loads(proc.stdout)["Dir"])
    except (ValueError, KeyError):
        raise UserError(f"the k8s.io/kubernetes module could not be downloaded for pause.c: {proc.stderr.strip()}; "
                        "the Go module proxy must be reachable (GOPROXY)") from None


def _pause(staging: Path) -> None:
    source = _kubernetes_source() / "build" / "pause" / "linux" / "pause.c"
    program = staging / "pause"
    proc = subprocess.run(["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_TAG}-pytorchjob-kit",
                           "-o", str(program), str(source)], capture_output=True, text=True,
                          preexec_fn=_yield)
    if proc.returncode != 0:
        raise UserError(f"gcc -static of {source} failed:\n{proc.stderr.strip()}\na static libc is needed "
                        "(`apt-get install -y libc6-dev`)")
    image = oci.Image(PAUSE_IMAGE, {"pause": (program.read_bytes(), 0o755)}, ("/pause",), PAUSE_USER)
    oci.write(image, staging / PAUSE_ARCHIVE)
    program.unlink()
