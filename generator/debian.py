"""Programs this machine lacks, installed from Debian's packages as root: podman and its tools for the
images, runc, iptables and the CNI plugins for the real node. `make e2e` builds the control plane and
the images side by side, and both may install packages; apt-get fails at once when another holds its
locks, so the installs here take turns on a lock of the project's, and wait for any other apt-get
at dpkg's own lock."""
from __future__ import annotations

import fcntl
import os
import subprocess

from generator import paths

LOCK_WAIT_S = 600


def install(packages: list[str]) -> str | None:
    """apt-get update, then install `packages`; None when both succeeded, else which failed and the
    end of what it said."""
    folder = paths.cache_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}"]
    with open(folder / "apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for argv in (["apt-get", *wait, "update"], ["apt-get", *wait, "install", "-y", "--no-install-recommends", *packages]):
            proc = subprocess.run(argv, env=env, capture_output=True, text=True)
            if proc.returncode:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
                return f"`apt-get {argv[-1] if argv[-1] == 'update' else 'install'}` failed:\n{tail}"
    return None
