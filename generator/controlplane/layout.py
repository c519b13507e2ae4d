"""Where one local cluster keeps its files (its state file's content is state.py's)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from generator import paths

# Every process a cluster starts carries its folder in this variable, so `cluster down` and the
# tests can tell its processes from any other, whatever they exec into.
MARKER = "PYTORCHJOB_KIT_CLUSTER_DIR"


def default_dir() -> Path:
    """Per checkout, unlike the binaries: two clones must not share one cluster's folder by accident."""
    return Path(os.environ.get("PYTORCHJOB_KIT_CLUSTER") or paths.ROOT / ".cache" / "cluster")


@dataclass(frozen=True)
class Layout:
    root: Path

    def create(self) -> None:
        """The cluster's folder, 0700: its keys, tokens, etcd data, kubeconfigs and the pods'
        volumes are nobody else's on this machine. Containers reach their own pod's folders through
        mounts of their own (kubelet.runtime.Hidden), never through this folder's mode."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def volumes(self) -> Path:
        """The provisioner's folder: every claim's volume, and the only host folder pods may mount."""
        return self.root / "volumes"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def supervisor_log(self) -> Path:
        return self.logs / "supervisor.log"

    def component_kubeconfig(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.yaml"


def started_by(pid: int, root: Path) -> bool:
    """Whether a running process belongs to the cluster in `root` (a recorded pid may have been reused)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{MARKER}={root}".encode() in environ
