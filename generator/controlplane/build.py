"""The control plane's binaries, built once from Go modules into a git-ignored cache:
etcd (embed), kube-apiserver, kube-controller-manager and kube-scheduler from one Kubernetes
release (this folder's go/ module), kubectl of the same release for the user,
training-operator v1.9.4 and the helm CLI, each from its own module."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from generator import paths
from generator.errors import UserError

GO_MODULE = Path(__file__).parent / "go"
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
BINARIES = ["etcd", *KUBE_COMMANDS, OPERATOR_BINARY, HELM_BINARY]


def cache_dir() -> Path:
    return Path(os.environ.get("PYTORCHJOB_KIT_CACHE") or paths.ROOT / ".cache")


def bin_dir() -> Path:
    return cache_dir() / "controlplane" / "bin"


def kube_version() -> str:
    """The k8s.io/kubernetes release go.mod requires."""
    for line in (GO_MODULE / "go.mod").read_text().splitlines():
        parts = line.split()  # "k8s.io/kubernetes v1.36.3" in the require block, or after "require"
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes":
            return parts[1]
    raise RuntimeError(f"{GO_MODULE / 'go.mod'} requires no k8s.io/kubernetes")


def _ldflags() -> str:
    """The release stamped into the binaries, as Kubernetes' own build does: without it the API
    server reports v0.0.0-master and Helm refuses charts with a kubeVersion constraint."""
    version = kube_version()
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(f"-X {pkg}.{k}={v}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                    for k, v in values.items())


def _kube_stamp() -> str:
    return "\n".join([(GO_MODULE / "go.mod").read_text(), (GO_MODULE / "go.sum").read_text(),
                      (GO_MODULE / "cmd" / "etcd" / "main.go").read_text(), _ldflags()])


# Each group of binaries with what it is built from; a change rebuilds that group alone.
GROUPS = {
    "kubernetes": (["etcd", *KUBE_COMMANDS], _kube_stamp),
    "operator": ([OPERATOR_BINARY], lambda: f"{OPERATOR_PACKAGE}@{OPERATOR_VERSION}"),
    "helm": ([HELM_BINARY], lambda: f"{HELM_PACKAGE}@{HELM_VERSION}"),
}


def _stale(group: str) -> bool:
    names, stamp = GROUPS[group]
    recorded = bin_dir() / f".stamp-{group}"
    return (not recorded.exists() or recorded.read_text() != stamp()
            or not all((bin_dir() / n).is_file() for n in names))


def missing() -> list[str]:
    return [name for group in GROUPS if _stale(group) for name in GROUPS[group][0]]


def ensure(say=print) -> Path:
    """Build what is missing or stale; return the folder holding every binary."""
    folder = bin_dir()
    todo = [g for g in GROUPS if _stale(g)]
    if not todo:
        return folder
    go = shutil.which("go")
    if not go:
        raise UserError("the local control plane is built from Go modules and `go` is not on PATH; install Go 1.26 "
                        "(https://go.dev/dl/) and run again")
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    if "kubernetes" in todo:
        say(f"building etcd and {', '.join(KUBE_COMMANDS)} from k8s.io/kubernetes (first time only; 10-20 minutes "
            "on 2 cores)")
        _go([go, "build", "-ldflags", _ldflags(), "-o", str(folder) + "/", "./cmd/etcd",
             *[f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]], GO_MODULE, env)
    # The operator and helm each build in their own module, with the dependencies they release with.
    for group, package, version in (("operator", OPERATOR_PACKAGE, OPERATOR_VERSION), ("helm", HELM_PACKAGE, HELM_VERSION)):
        if group in todo:
            say(f"building {GROUPS[group][0][0]} from {package}@{version}")
            _go([go, "install", f"{package}@{version}"], folder, {**env, "GOBIN": str(folder), "GOFLAGS": ""})
    for group in todo:
        (folder / f".stamp-{group}").write_text(GROUPS[group][1]())
    return folder


def _go(argv: list[str], cwd: Path, env: dict) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise UserError(f"`{' '.join(argv[:3])} ...` failed in {cwd}:\n{tail}\nthe Go module proxy must be reachable "
                        "(GOPROXY) for the first build")
