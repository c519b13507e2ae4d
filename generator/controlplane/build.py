"""Everything this machine builds for the local cluster, as one table of groups with one routine
that builds a group. The control plane's: etcd (embed), kube-apiserver, kube-controller-manager,
kube-scheduler and kubectl of one Kubernetes release, training-operator v1.9.4, the helm CLI,
Kubeflow Trainer's controller, JobSet's, the registry and Kueue's. The real node's, built only when
asked (`cluster build`, `cluster up`): the kubelet and kube-proxy of that release, containerd v2
with its runc shim and ctr, CoreDNS and the sandbox (pause) image. What each is built from is
pins.py's.

Each group lives in the user's cache under a folder named for a hash of what it is built from (its
stamp), so every clone, CI run and `git clean` on this machine reuses the same build, and a change
of pins builds a new folder beside the old one instead of overwriting what another clone still
uses."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from generator import paths
from generator.controlplane import pins
from generator.controlplane.realnode import pause
from generator.errors import UserError

# Written last into a group's folder: a folder without it is an interrupted build.
COMPLETE = ".complete"
# What to do when a group's tool is missing.
TOOLS = {"go": "install Go 1.26 (https://go.dev/dl/)", "gcc": "install it (`apt-get install -y gcc libc6-dev`)"}
NO_CGO = ("CGO_ENABLED", "0")


@dataclass(frozen=True)
class Go:
    """A group built with Go: `go build` of `packages` in `module`, a module of ours, or without one
    `go install` of package@version, in an empty folder, with the dependencies it releases with."""
    packages: tuple[str, ...]
    module: Path | None = None
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # besides the GOFLAGS go_command sets
    output: str = ""  # the one binary's name, where the package's own is not it
    # In a copy of the module's go.mod and go.sum: the build adds go.sum lines, which must not change
    # the module other groups are stamped from (that would rebuild them all).
    in_copy: bool = False


@dataclass(frozen=True)
class Group:
    name: str
    files: tuple[str, ...]
    stamp: str  # what the group is built from: its folder is named by its hash
    recipe: Go | Callable[[Path], None]  # Go, or a function writing the files into the folder it is given
    says: str  # what is built from what, for the line shown as it starts
    takes: str = ""  # how long, on that line
    node: bool = False  # the real node's: built only when asked, at a lower priority
    tools: tuple[str, ...] = ("go",)

    @property
    def folder(self) -> str:
        key = hashlib.sha256(self.stamp.encode()).hexdigest()[:16]
        return f"{'node-' if self.node else ''}{self.name}-{key}"


def _texts(*files: Path) -> list[str]:
    return [f.read_text() for f in files]


def _installed(name: str, binary: str, package: str, version: str) -> Group:
    return Group(name, (binary,), f"{package}@{version}", Go((f"{package}@{version}",)), f"{binary} from {package}@{version}")


def _control_plane(kube: list[str], ldflags: str) -> list[Group]:
    """The control plane's groups. etcd builds in Kubernetes' module but is a group of its own, so a
    change to its main.go does not relink Kubernetes."""
    commands = tuple(pins.KUBE_COMMANDS)
    return [
        Group("etcd", ("etcd",), "\n".join([*kube, pins.ETCD_MAIN.read_text()]), Go(("./cmd/etcd",), pins.GO_MODULE),
              "etcd from go.etcd.io/etcd/server/v3 (embed)"),
        Group("kubernetes", commands, "\n".join([*kube, ldflags]),
              Go(tuple(f"k8s.io/kubernetes/cmd/{c}" for c in commands), pins.GO_MODULE, ("-ldflags", ldflags)),
              f"{', '.join(commands)} from k8s.io/kubernetes", " (once per machine; about 5 minutes on 2 cores)"),
        _installed("operator", pins.OPERATOR_BINARY, pins.OPERATOR_PACKAGE, pins.OPERATOR_VERSION),
        _installed("helm", pins.HELM_BINARY, pins.HELM_PACKAGE, pins.HELM_VERSION),
        _installed("trainer", pins.TRAINER_BINARY, pins.TRAINER_PACKAGE, pins.TRAINER_VERSION),
        Group("jobset", (pins.JOBSET_BINARY,), "\n".join(_texts(pins.JOBSET_MODULE_DIR / "go.mod", pins.JOBSET_MODULE_DIR / "go.sum")),
              Go((pins.JOBSET_MODULE,), pins.JOBSET_MODULE_DIR), f"the JobSet controller {pins.JOBSET_MODULE}@{pins.jobset_version()}"),
        _installed("registry", pins.REGISTRY_BINARY, pins.REGISTRY_PACKAGE, pins.REGISTRY_VERSION),
        _installed("kueue", pins.KUEUE_BINARY, pins.KUEUE_PACKAGE, pins.KUEUE_VERSION),
    ]


def _node(kube: list[str], ldflags: str) -> list[Group]:
    """The real node's groups; the kubelet and kube-proxy are of the control plane's release."""
    kubernetes = [Group(c, (c,), "\n".join([*kube, ldflags, f"k8s.io/kubernetes/cmd/{c}"]),
                        Go((f"k8s.io/kubernetes/cmd/{c}",), pins.GO_MODULE, ("-ldflags", ldflags), in_copy=True),
                        f"the {c} from k8s.io/kubernetes {pins.kube_version()}",
                        " (once per machine; under a minute after the control plane's build)", node=True)
                  for c in (pins.KUBELET, pins.KUBE_PROXY)]
    containerd, coredns = pins.CONTAINERD_MODULE_DIR, pins.COREDNS_MODULE_DIR
    minute = " (once per machine; about a minute on 2 cores)"
    return [
        *kubernetes,
        Group("containerd", tuple(pins.CONTAINERD_BINARIES),
              "\n".join([*_texts(containerd / "go.mod", containerd / "go.sum"), pins.CONTAINERD_TAGS, "=".join(NO_CGO)]),
              Go(tuple(f"{pins.CONTAINERD_MODULE}/cmd/{c}" for c in pins.CONTAINERD_BINARIES), containerd,
                 ("-tags", pins.CONTAINERD_TAGS), (NO_CGO,)),
              f"{', '.join(pins.CONTAINERD_BINARIES[:-1])} and {pins.CONTAINERD_BINARIES[-1]} from "
              f"{pins.CONTAINERD_MODULE}@{pins.containerd_version()}", minute, node=True),
        Group("coredns", (pins.COREDNS,),
              "\n".join([*_texts(coredns / "go.mod", coredns / "go.sum", coredns / "main.go"), "=".join(NO_CGO)]),
              Go((".",), coredns, ("-trimpath",), (NO_CGO,), output=pins.COREDNS),
              f"CoreDNS from {pins.COREDNS_MODULE}@{pins.coredns_version()}", minute, node=True),
        Group("pause", (pins.PAUSE_ARCHIVE,), "\n".join([pins.kube_version(), pins.PAUSE_TAG, pins.PAUSE_IMAGE,
                                                        pins.PAUSE_USER, pause.PACKER.read_text()]),
              pause.build, f"the sandbox image {pins.PAUSE_IMAGE} (kubernetes' pause.c, gcc -static)", node=True,
              tools=("go", "gcc")),
    ]


def table() -> dict[str, Group]:
    """Every group by name, read from pins.py and the modules' files as they are now: a change to what
    one group is built from names a new folder for that group alone."""
    kube, ldflags = _texts(pins.GO_MODULE / "go.mod", pins.GO_MODULE / "go.sum"), pins.ldflags()
    return {g.name: g for g in [*_control_plane(kube, ldflags), *_node(kube, ldflags)]}


def part(node: bool = False) -> list[str]:
    """The names of the control plane's groups, or of the real node's."""
    return [name for name, g in table().items() if g.node == node]


def go_command(recipe: Go, go: str, staging: Path, environ: Mapping[str, str]) -> tuple[list[str], Path, dict[str, str]]:
    """The command line, folder and environment that build `recipe` into `staging`."""
    if recipe.module is None:  # outside any module, so `go install` takes the package's own go.mod
        return [go, "install", *recipe.packages], staging, {**environ, "GOBIN": str(staging), "GOFLAGS": "",
                                                               **dict(recipe.env)}
    out = str(staging / recipe.output) if recipe.output else str(staging) + "/"
    return ([go, "build", *recipe.flags, "-o", out, *recipe.packages], staging / "module" if recipe.in_copy else recipe.module,
            {**environ, "GOFLAGS": "-mod=mod", **dict(recipe.env)})


def _root() -> Path:
    return paths.cache_dir() / "controlplane"


def group_dir(group: str) -> Path:
    return _root() / table()[group].folder


def _holding(name: str) -> Group:
    return next(g for g in table().values() if name in g.files)


def group_of(name: str) -> str:
    return _holding(name).name


def binary(name: str) -> Path:
    """Where the built file `name` is (or will be, once `ensure` has built its group)."""
    return _root() / _holding(name).folder / name


def _built(group: Group) -> bool:
    folder = _root() / group.folder
    return (folder / COMPLETE).is_file() and all((folder / n).is_file() for n in group.files)


def files(groups: list[str] | None = None) -> list[str]:
    """The files of `groups`, else of the control plane's."""
    every = table()
    return [name for g in (groups or part()) for name in every[g].files]


def missing(groups: list[str] | None = None) -> list[str]:
    """The files of `groups` (else of the control plane's) not built yet."""
    every = table()
    return [name for g in (groups or part()) if not _built(every[g]) for name in every[g].files]


def ensure(say=print, groups: list[str] | None = None) -> dict[str, Path]:
    """Build what is missing of `groups` (else of the control plane's); return each of their files'
    paths. Concurrent callers (two clones, a CI job beside a developer) wait for one another on a
    lock per group instead of building twice."""
    every = table()
    asked = [every[g] for g in (groups or part())]
    todo = [g for g in asked if not _built(g)]
    for group in todo:
        for tool in group.tools:
            if not shutil.which(tool):
                raise UserError(f"{group.says} is built with `{tool}`, which is not on PATH; {TOOLS[tool]} and run again")
    for group in todo:
        _locked_build(group, say)
    return {name: _root() / g.folder / name for g in asked for name in g.files}


def _locked_build(group: Group, say) -> None:
    root = _root()
    folder = root / group.folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _built(group):  # another process built it while we waited
            return
        say(f"building {group.says} into {folder}{group.takes}")
        # Built beside the final folder and renamed into place, so no reader ever sees half a group.
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
        try:
            if isinstance(group.recipe, Go):
                _go(group.recipe, staging, group.node)
            else:
                group.recipe(staging)
            (staging / COMPLETE).write_text(group.stamp)
            if folder.exists():  # an interrupted build's leftovers
                shutil.rmtree(folder)
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _yield() -> None:
    """The node's builds run at a lower priority: they share the machine's cores with everyone's work."""
    os.nice(10)


def _go(recipe: Go, staging: Path, lower: bool) -> None:
    argv, cwd, env = go_command(recipe, shutil.which("go"), staging, os.environ)
    if recipe.in_copy:
        cwd.mkdir()
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(recipe.module / name, cwd / name)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, preexec_fn=_yield if lower else None)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise UserError(f"`{' '.join(argv[:3])} ...` failed in {cwd}:\n{tail}\nthe Go module proxy must be reachable "
                        "(GOPROXY) for the first build")
    if recipe.in_copy:
        shutil.rmtree(cwd)
