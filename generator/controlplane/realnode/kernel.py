"""The six kernel settings the real node's kubelet sets machine-wide (with protectKernelDefaults
false; with true it refuses to start): recorded before the first cluster's kubelet starts and put
back when the last cluster that holds the record is down. A cluster whose folder is gone (deleted
without `cluster down`) holds it no more, so it cannot keep the settings changed until a reboot."""
from __future__ import annotations

import json
import os
from pathlib import Path

from generator import files

# The kubelet with protectKernelDefaults: false sets these machine-wide (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go: 1, 0, 10, 1, 1000000, 25000000); with true it refuses to
# start unless they already have those values. A kernel without keys support lacks the last two.
KERNEL_SETTINGS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                   "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
SYSCTL_DIR = Path("/proc/sys")
# One record for the machine: two clusters' kubelets set the same settings, and the values put back
# must be the ones from before the first of them, once the last is down.
KERNEL_RECORD = Path("/run/pytorchjob-kit/kernel-settings.json")

def _sysctl(name: str, sysctl_dir: Path) -> Path:
    return sysctl_dir / name.replace(".", "/")


def hold_kernel_settings(holder: Path, record: Path = KERNEL_RECORD, sysctl_dir: Path = SYSCTL_DIR) -> dict[str, str]:
    """Record the kernel settings before this cluster's kubelet changes them (unless another
    cluster's record holds them already), and add `holder` to the clusters holding it."""
    with files.record_lock(record):
        held = _read(record)
        if not held:
            held = {"values": {n: _sysctl(n, sysctl_dir).read_text().strip() for n in KERNEL_SETTINGS
                               if _sysctl(n, sysctl_dir).exists()}, "holders": []}
        # The values stay the first cluster's even when every holder's folder is gone: the settings now
        # are its kubelet's.
        held["holders"] = _present(held["holders"])
        if str(holder) not in held["holders"]:
            held["holders"].append(str(holder))
        _write(record, held)
        return held["values"]


def release_kernel_settings(holder: Path, record: Path = KERNEL_RECORD, sysctl_dir: Path = SYSCTL_DIR) -> list[str]:
    """`holder` lets go of the record; the last to let go puts the recorded values back. What was put back."""
    with files.record_lock(record):
        held = _read(record)
        if not held or str(holder) not in held["holders"]:
            return []
        held["holders"] = [h for h in _present(held["holders"]) if h != str(holder)]
        if held["holders"]:
            _write(record, held)
            return []
        restored = []
        for name in (n for n in KERNEL_SETTINGS if n in held["values"]):
            value = held["values"][name]
            target = _sysctl(name, sysctl_dir)
            if target.read_text().strip() != value:
                target.write_text(value)
                restored.append(f"{name}={value}")
        record.unlink()
        return restored


def _present(holders: list[str]) -> list[str]:
    """The holders whose cluster folder is still there."""
    return [h for h in holders if os.path.isdir(h)]


def _read(record: Path) -> dict:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return {}


def _write(record: Path, held: dict) -> None:
    files.write_whole(record, json.dumps(held, indent=2, sort_keys=True), 0o600)
