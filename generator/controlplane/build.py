"""The control plane's binaries, built once per machine from Go modules: etcd (embed),
kube-apiserver, kube-controller-manager and kube-scheduler from one Kubernetes release (this
folder's go/ module, etcd built alone), kubectl of the same release for the user, training-operator
v1.9.4, the helm CLI, Kubeflow Trainer v2.3.0's controller and Kueue's, each from its own module,
and the JobSet controller Trainer requires from this folder's jobset/ module.

Each group of binaries lives in the user's cache under a folder named for a hash of what it is
built from, so every clone, CI run and `git clean` on this machine reuses the same build, and a
change of pins builds a new folder beside the old one instead of overwriting what another clone
still uses."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from generator import paths
from generator.errors import UserError

GO_MODULE = paths.go_module("go")
KUBE_COMMANDS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
OPERATOR_MODULE = "github.com/kubeflow/training-operator"
OPERATOR_VERSION = "v1.9.4"
OPERATOR_PACKAGE = f"{OPERATOR_MODULE}/cmd/training-operator.v1"
OPERATOR_BINARY = "training-operator.v1"
# Helm v4, the major our users install now and the engine the generator renders with (helm-python-sdk).
HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.1"
HELM_PACKAGE = f"{HELM_MODULE}/cmd/helm"
HELM_BINARY = "helm"
# Kubeflow Trainer v2 and the JobSet controller its chart depends on (`cluster up --trainer`).
TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
TRAINER_VERSION = "v2.3.0"
TRAINER_PACKAGE = f"{TRAINER_MODULE}/cmd/trainer-controller-manager"
TRAINER_BINARY = "trainer-controller-manager"
# JobSet's version is the one jobset/go.mod requires; `go install` cannot build it (the proxy will not list it).
JOBSET_MODULE_DIR = paths.go_module("jobset")
JOBSET_MODULE = "sigs.k8s.io/jobset"
JOBSET_BINARY = "jobset"
# The OCI registry that holds this machine's images (controlplane/registry.py): distribution's, the
# registry most clusters' mirrors run.
REGISTRY_MODULE = "github.com/distribution/distribution/v3"
REGISTRY_VERSION = "v3.0.0"
REGISTRY_PACKAGE = f"{REGISTRY_MODULE}/cmd/registry"
REGISTRY_BINARY = "registry"
# Kueue (`cluster up --kueue`): the newest release the proxy serves; it admits both PyTorchJobs (an
# integration deprecated since v0.19, its removal planned for v0.20) and TrainJobs.
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.19.2"
KUEUE_PACKAGE = f"{KUEUE_MODULE}/cmd/kueue"
KUEUE_BINARY = "kueue"
BINARIES = ["etcd", *KUBE_COMMANDS, OPERATOR_BINARY, HELM_BINARY, TRAINER_BINARY, JOBSET_BINARY, REGISTRY_BINARY,
            KUEUE_BINARY]
# Written last into a group's folder: a folder without it is an interrupted build.
COMPLETE = ".complete"


def kube_version() -> str:
    """The k8s.io/kubernetes release go.mod requires."""
    return required(GO_MODULE / "go.mod", "k8s.io/kubernetes")


def _ldflags() -> str:
    """The release stamped into the binaries, as Kubernetes' own build does: without it the API
    server reports v0.0.0-master and Helm refuses charts with a kubeVersion constraint."""
    version = kube_version()
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(f"-X {pkg}.{k}={v}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                    for k, v in values.items())


ETCD_MAIN = GO_MODULE / "cmd" / "etcd" / "main.go"


def _module() -> list[str]:
    return [(GO_MODULE / "go.mod").read_text(), (GO_MODULE / "go.sum").read_text()]


def required(go_mod: Path, module: str) -> str:
    """The version of `module` that the go.mod `go_mod` requires."""
    for line in go_mod.read_text().splitlines():
        parts = line.split()  # "k8s.io/kubernetes v1.36.3" in the require block, or after "require"
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise RuntimeError(f"{go_mod} requires no {module}")


def jobset_version() -> str:
    return required(JOBSET_MODULE_DIR / "go.mod", JOBSET_MODULE)


def _jobset_stamp() -> str:
    return "\n".join([(JOBSET_MODULE_DIR / "go.mod").read_text(), (JOBSET_MODULE_DIR / "go.sum").read_text()])


def _kube_stamp() -> str:
    return "\n".join([*_module(), _ldflags()])


def _etcd_stamp() -> str:
    return "\n".join([*_module(), ETCD_MAIN.read_text()])


# Each group of binaries with what it is built from; a change builds that group alone, into a new folder
# (etcd's own main.go changes without relinking Kubernetes).
GROUPS = {
    "etcd": (["etcd"], _etcd_stamp),
    "kubernetes": (KUBE_COMMANDS, _kube_stamp),
    "operator": ([OPERATOR_BINARY], lambda: f"{OPERATOR_PACKAGE}@{OPERATOR_VERSION}"),
    "helm": ([HELM_BINARY], lambda: f"{HELM_PACKAGE}@{HELM_VERSION}"),
    "trainer": ([TRAINER_BINARY], lambda: f"{TRAINER_PACKAGE}@{TRAINER_VERSION}"),
    "jobset": ([JOBSET_BINARY], _jobset_stamp),
    "registry": ([REGISTRY_BINARY], lambda: f"{REGISTRY_PACKAGE}@{REGISTRY_VERSION}"),
    "kueue": ([KUEUE_BINARY], lambda: f"{KUEUE_PACKAGE}@{KUEUE_VERSION}"),
}


def group_of(name: str) -> str:
    return next(g for g, (names, _) in GROUPS.items() if name in names)


def group_dir(group: str) -> Path:
    key = hashlib.sha256(GROUPS[group][1]().encode()).hexdigest()[:16]
    return paths.cache_dir() / "controlplane" / f"{group}-{key}"


def binary(name: str) -> Path:
    """Where the built binary `name` is (or will be, once `ensure` has built it)."""
    return group_dir(group_of(name)) / name


def _built(group: str) -> bool:
    folder = group_dir(group)
    return (folder / COMPLETE).is_file() and all((folder / n).is_file() for n in GROUPS[group][0])


def missing() -> list[str]:
    return [name for group in GROUPS if not _built(group) for name in GROUPS[group][0]]


def ensure(say=print, groups: list[str] | None = None) -> dict[str, Path]:
    """Build what is missing (of `groups`, else of all); return each binary's path. Concurrent
    callers (two clones, a CI job beside a developer) wait for one another on a lock per group
    instead of building twice."""
    todo = [g for g in (groups or GROUPS) if not _built(g)]
    if todo and not shutil.which("go"):
        raise UserError("the local control plane is built from Go modules and `go` is not on PATH; install Go 1.26 "
                        "(https://go.dev/dl/) and run again")
    for group in todo:
        folder = group_dir(group)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _built(group):  # another process may have built it while we waited
                _build(group, folder, say)
    return {name: binary(name) for name in BINARIES}


def _build(group: str, folder: Path, say) -> None:
    go = shutil.which("go")
    # Built beside the final folder and renamed into place, so no reader ever sees half a group.
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        if group == "kubernetes":
            say(f"building {', '.join(KUBE_COMMANDS)} from k8s.io/kubernetes into {folder} (once per "
                "machine; about 5 minutes on 2 cores)")
            _go([go, "build", "-ldflags", _ldflags(), "-o", str(staging) + "/",
                 *[f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]], GO_MODULE,
                {**os.environ, "GOFLAGS": "-mod=mod"})
        elif group == "etcd":
            say(f"building etcd from go.etcd.io/etcd/server/v3 (embed) into {folder}")
            _go([go, "build", "-o", str(staging) + "/", "./cmd/etcd"], GO_MODULE, {**os.environ, "GOFLAGS": "-mod=mod"})
        elif group == "jobset":
            say(f"building the JobSet controller {JOBSET_MODULE}@{jobset_version()} into {folder}")
            _go([go, "build", "-o", str(staging) + "/", JOBSET_MODULE], JOBSET_MODULE_DIR,
                {**os.environ, "GOFLAGS": "-mod=mod"})
        else:
            # The operator, helm, Trainer and Kueue each build in their own module, with the dependencies they
            # release with.
            package = GROUPS[group][1]()
            say(f"building {GROUPS[group][0][0]} from {package} into {folder}")
            _go([go, "install", package], staging, {**os.environ, "GOBIN": str(staging), "GOFLAGS": ""})
        (staging / COMPLETE).write_text(GROUPS[group][1]())
        if folder.exists():  # an interrupted build's leftovers
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _go(argv: list[str], cwd: Path, env: dict) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise UserError(f"`{' '.join(argv[:3])} ...` failed in {cwd}:\n{tail}\nthe Go module proxy must be reachable "
                        "(GOPROXY) for the first build")
