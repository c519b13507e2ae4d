"""The typed state of one local cluster and of its node, and their one encoding each.

`ClusterState` is what the supervisor writes to DIR/state.json as it brings the cluster up, and
what `cluster up`, `status` and `down` read back. `NodeOptions` is what `cluster up` was asked for
the node (capacity, images, Pod Security); it travels `cluster up` -> supervisor as one JSON argument."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from generator import files
from generator.controlplane.network import PodNetwork
from generator.errors import UserError

# Raised when a field is added, renamed or changes meaning: a state file of another version is
# refused by name instead of being half-read. Version 1 is the untyped file, which had no version.
# Version 5 added node_options: an older file is refused with the way out (`cluster down`) rather than
# read as a node with no images, which would let `cluster up --image` pass a mapping the node lacks.
# Version 6 dropped the node's kind (one node kind is left: the kubelet with containerd and runc).
# Version 7 added several nodes (node_options.count, nodes) and the node grace period.
VERSION = 7
LIVE_PHASES = ("starting", "ready", "degraded")


class StateError(UserError):
    """A state file this version cannot read; the message names the file and the fix."""


@dataclass(frozen=True)
class NodeOptions:
    """The node as `cluster up` describes it: its allocatable CPU and memory (None: what this
    machine has, as its kubelet measures it), the nvidia.com/gpu it advertises, and the images
    `--image` puts into the registry (REPO:TAG -> DIR[:PATH])."""
    cpu: str | None = None
    memory: str | None = None
    gpus: int = 0
    images: dict[str, str] = field(default_factory=dict)
    # The Pod Security Standard enforced in every namespace that does not choose its own by label.
    pod_security: str = "baseline"
    count: int = 1  # how many nodes (`cluster up --nodes`), each with these options
    # Seconds a node may stop answering before it is NotReady (node-monitor-grace-period); None:
    # Kubernetes' own (50 s). Short only for rehearsing a node's loss.
    grace: int | None = None

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> NodeOptions:
        try:
            raw = json.loads(text)
            options = cls(**raw)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"--node {text!r} is not the node options' JSON ({exc}); the supervisor writes it, "
                             "start the node with `python -m generator cluster up`") from None
        if not isinstance(options.gpus, int) or not isinstance(options.images, dict) \
                or not isinstance(options.count, int) or not isinstance(options.grace, (int, type(None))):
            raise ValueError(f"--node {text!r}: gpus, count and grace must be integers and images an object")
        return options


@dataclass(frozen=True)
class Process:
    pid: int
    log: str


@dataclass(frozen=True)
class InstalledRelease:
    """A release `cluster up` installed (the operator's, Trainer's, Kueue's): where, and its controller."""
    namespace: str
    deployment: str
    release: str
    chart: str = ""  # where helm installed it from: a folder, or oci://HOST/charts/NAME


@dataclass(frozen=True)
class NodeState:
    """One node as its supervisor runs it: starting, ready, or killed (`cluster node kill`, which
    pulls its power: its processes and containers gone, its folder kept), and since when (UTC)."""
    phase: str
    since: str


@dataclass
class ClusterState:
    phase: str = "starting"  # starting, ready, degraded, failed, stopped
    pid: int | None = None  # the supervisor's
    error: str | None = None
    step: str | None = None  # the bring-up step under way, or the last one
    server: str | None = None
    kubeconfig: str | None = None
    node: str | None = None  # the first node's name
    nodes: dict[str, NodeState] = field(default_factory=dict)  # every node, by name, in order
    node_options: NodeOptions | None = None  # what the node was started with (its images are fixed then)
    operator: InstalledRelease | None = None
    trainer: InstalledRelease | None = None  # Kubeflow Trainer's release (`cluster up --trainer`)
    kueue: InstalledRelease | None = None  # Kueue's release (`cluster up --kueue`)
    pod_network: PodNetwork | None = None
    processes: dict[str, Process] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, **asdict(self)}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        """Raises ValueError naming what is wrong; `load` turns it into the user's error."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        version = raw.pop("version", 1)
        if version != VERSION:
            raise _OtherVersion(version)
        unknown = set(raw) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown fields {', '.join(sorted(unknown))}")
        try:
            operator = raw.pop("operator", None)
            trainer = raw.pop("trainer", None)
            kueue = raw.pop("kueue", None)
            network = raw.pop("pod_network", None)
            node_options = raw.pop("node_options", None)
            children = raw.pop("processes", None) or {}
            nodes = raw.pop("nodes", None) or {}
            return cls(**raw, operator=InstalledRelease(**operator) if operator else None,
                       trainer=InstalledRelease(**trainer) if trainer else None,
                       kueue=InstalledRelease(**kueue) if kueue else None,
                       pod_network=PodNetwork(**network) if network else None,
                       node_options=NodeOptions(**node_options) if node_options else None,
                       processes={name: Process(**info) for name, info in children.items()},
                       nodes={name: NodeState(**info) for name, info in nodes.items()})
        except TypeError as exc:
            raise ValueError(str(exc)) from None


class _OtherVersion(ValueError):
    def __init__(self, version):
        super().__init__(f"written by another pytorchjob-kit version (state version {version!r}, this one reads {VERSION})")


def load(path: Path) -> ClusterState | None:
    """The state in `path`; None when there is none (no cluster was ever started there)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: cannot be read ({exc.strerror}); run as the user who started the cluster") from None
    try:
        return ClusterState.from_json(text)
    except ValueError as exc:
        reason = str(exc) if isinstance(exc, _OtherVersion) else f"not a cluster state ({exc})"
        raise StateError(f"{path}: {reason}; run `python -m generator cluster down --dir {path.parent}`, which "
                         "stops what that cluster left running without it and removes the file") from None


def save(path: Path, state: ClusterState) -> None:
    """Written whole or not at all: a reader never sees half a state. The temp file is made anew
    (O_EXCL) and never through a link: one planted at its name would have root write where it points."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_whole(path, state.to_json(), 0o600)
