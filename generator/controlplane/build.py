"""The control plane's binaries, built once from Go modules into a git-ignored cache:
etcd (embed), kube-apiserver, kube-controller-manager and kube-scheduler from one Kubernetes
release (this folder's go/ module), kubectl of the same release for the user, and
training-operator v1.9.4 from its own module."""
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
BINARIES = ["etcd", *KUBE_COMMANDS, OPERATOR_BINARY]


def cache_dir() -> Path:
    return Path(os.environ.get("PYTORCHJOB_KIT_CACHE") or paths.ROOT / ".cache")


def bin_dir() -> Path:
    return cache_dir() / "controlplane" / "bin"


def _stamp() -> str:
    """What the binaries were built from; a change rebuilds them."""
    return "\n".join([(GO_MODULE / "go.mod").read_text(), (GO_MODULE / "go.sum").read_text(),
                      (GO_MODULE / "cmd" / "etcd" / "main.go").read_text(), f"{OPERATOR_PACKAGE}@{OPERATOR_VERSION}"])


def missing() -> list[str]:
    folder = bin_dir()
    stamp = folder / ".stamp"
    if not stamp.exists() or stamp.read_text() != _stamp():
        return list(BINARIES)
    return [b for b in BINARIES if not (folder / b).is_file()]


def ensure(say=print) -> Path:
    """Build what is missing or stale; return the folder holding every binary."""
    todo = missing()
    folder = bin_dir()
    if not todo:
        return folder
    go = shutil.which("go")
    if not go:
        raise UserError("the local control plane is built from Go modules and `go` is not on PATH; install Go 1.26 "
                        "(https://go.dev/dl/) and run again")
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    say(f"building etcd and {', '.join(KUBE_COMMANDS)} from k8s.io/kubernetes (first time only; 10-20 minutes "
        "on 2 cores)")
    _go([go, "build", "-o", str(folder) + "/", "./cmd/etcd",
         *[f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]], GO_MODULE, env)
    say(f"building the operator from {OPERATOR_PACKAGE}@{OPERATOR_VERSION}")
    _go([go, "install", f"{OPERATOR_PACKAGE}@{OPERATOR_VERSION}"], folder, {**env, "GOBIN": str(folder),
                                                                                        "GOFLAGS": ""})
    (folder / ".stamp").write_text(_stamp())
    return folder


def _go(argv: list[str], cwd: Path, env: dict) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise UserError(f"`{' '.join(argv[:3])} ...` failed in {cwd}:\n{tail}\nthe Go module proxy must be reachable "
                        "(GOPROXY) for the first build")
