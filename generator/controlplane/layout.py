"""Where one local cluster keeps its files (its state file's content is state.py's)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from generator import paths, trusted
from generator.errors import UserError

# Every process a cluster starts carries its folder in this variable, so `cluster down` and the
# tests can tell its processes from any other, whatever they exec into.
MARKER = "PYTORCHJOB_KIT_CLUSTER_DIR"
# What `cluster up` writes into the cluster's folder: only a folder that has it is ever purged.
MARK_FILE = ".pytorchjob-kit-cluster"
MARK_TEXT = ("A pytorchjob-kit cluster's folder: `python -m generator cluster down --purge --dir` on it removes its "
             "keys, tokens, etcd data, volumes and logs.\n")


FIX = "name a folder of your own, such as one in your home folder, with --dir"


def default_dir() -> Path:
    """Per checkout, unlike the binaries (paths.cluster_dir); $PYTORCHJOB_KIT_CLUSTER first."""
    return Path(os.environ.get("PYTORCHJOB_KIT_CLUSTER") or paths.cluster_dir())


@dataclass(frozen=True)
class Layout:
    root: Path

    def create(self) -> None:
        """The cluster's folder, 0700: its keys, tokens, etcd data, kubeconfigs and the pods'
        volumes are nobody else's on this machine. Containers reach their own pod's folders through
        mounts of their own (kubelet.runtime.Hidden), never through this folder's mode.

        A folder that is there already is taken only when it is the user's own, not a link, and
        empty or a cluster's (its marker): never another user's folder, CA included, and never a
        folder of other files, which `cluster down --purge` would then empty."""
        trusted.check(self.root, "--dir", FIX, itself=False)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        trusted.check(self.root, "--dir", FIX, itself=False)  # the folders just made too (a umask of 0 makes them everyone's)
        try:
            os.mkdir(self.root, 0o700)
        except FileExistsError:
            pass
        fd = self._open()
        try:
            if os.fstat(fd).st_mode & 0o022 and os.listdir(fd):
                raise UserError(f"{self.root} is writable by other users and holds files, which may be theirs; name a "
                                "new or empty folder with --dir")
            if not self._marked(fd) and os.listdir(fd):
                raise UserError(f"{self.root} holds files, and no cluster made it (it has no {MARK_FILE}); name a new "
                                "or empty folder with --dir, or the folder of a cluster that `cluster up` made")
            os.fchmod(fd, 0o700)  # on the folder opened, never through a link
            mark = os.open(MARK_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                           dir_fd=fd)
            with os.fdopen(mark, "w") as handle:
                handle.write(MARK_TEXT)
        finally:
            os.close(fd)

    def check_owned(self) -> None:
        """Refuse, before its state file is read, a folder that is not the user's own (or is a link to
        one, or lies where another user could swap it): what another user wrote there must not be
        what root stops, deletes or writes through. No folder at all holds nothing to read."""
        trusted.check(self.root, "--dir", FIX, itself=False)
        if not os.path.lexists(self.root):
            return
        fd = self._open(create=False)
        mode = os.fstat(fd).st_mode
        os.close(fd)
        if mode & 0o022:
            raise UserError(f"{self.root} is writable by other users (mode {mode & 0o7777:o}), so what it holds may be "
                            "theirs: nothing was read or changed; check --dir")

    def check_ours(self) -> None:
        """Refuse, before anything there is touched, unless the folder is a cluster's (its marker)
        and belongs to the user running: `--purge --dir /var/lib` must delete nothing. No folder at
        all holds nothing to remove."""
        trusted.check(self.root, "--dir", FIX, itself=False)
        if not os.path.lexists(self.root):
            return
        fd = self._open(create=False)
        try:
            if not self._marked(fd):
                raise UserError(f"{self.root} is not a cluster's folder (it has no {MARK_FILE}, which `cluster up` "
                                "writes): nothing was removed; check --dir")
        finally:
            os.close(fd)

    def _open(self, create: bool = True) -> int:
        """The folder itself, opened without following a link, and checked to be the user's."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise UserError(f"{self.root}: no such folder; check --dir") from None
        except OSError:
            what = "a symbolic link" if self.root.is_symlink() else "not a folder"
            raise UserError(f"{self.root} is {what}; name the cluster's folder itself with --dir") from None
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            os.close(fd)
            raise UserError(f"{self.root} belongs to uid {owner}, not to you (uid {os.geteuid()}); "
                            + ("name a folder of your own with --dir" if create else "nothing was removed; check --dir"))
        return fd

    def _marked(self, fd: int) -> bool:
        """The marker, or the readable state file of a cluster an earlier version made (before the marker)."""
        import stat

        for name in (MARK_FILE, "state.json"):
            try:
                seen = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(seen.st_mode):
                continue
            if name == MARK_FILE:
                return True
            from generator.controlplane import state

            try:
                return state.load(self.state_file) is not None
            except state.StateError:
                return False
        return False

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
    return carries(pid, MARKER, str(root))


def carries(pid: int, name: str, value: str) -> bool:
    """Whether a running process's environment holds NAME=VALUE (False when it cannot be read)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{name}={value}".encode() in environ
