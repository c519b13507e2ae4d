"""The kernel settings the real node's kubelet sets machine-wide are put back by the last cluster
down, to the values from before the first cluster's kubelet (on a folder laid out as /proc/sys)."""
from __future__ import annotations

from pathlib import Path

import pytest

from generator.controlplane.realnode import kernel


@pytest.fixture
def sysctls(tmp_path) -> Path:
    """A folder laid out as /proc/sys, holding the three settings as this machine's kind has them."""
    folder = tmp_path / "sys"
    for name, value in {"vm.overcommit_memory": "0", "kernel.panic": "0", "kernel.panic_on_oops": "0"}.items():
        path = folder / name.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return folder


def kubelet_sets(folder: Path) -> None:
    """What the kubelet does at start with protectKernelDefaults: false."""
    for name, value in {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}.items():
        (folder / name).write_text(value + "\n")


def values(folder: Path) -> dict[str, str]:
    return {n: (folder / n.replace(".", "/")).read_text().strip() for n in kernel.KERNEL_SETTINGS}


def test_the_last_cluster_down_puts_back_the_settings_from_before_the_first_kubelet(tmp_path, sysctls):
    record = tmp_path / "run" / "kernel-settings.json"
    before = values(sysctls)
    assert kernel.hold_kernel_settings(Path("/a"), record, sysctls) == before
    kubelet_sets(sysctls)
    # A second cluster records nothing new: the values are the first one's.
    assert kernel.hold_kernel_settings(Path("/b"), record, sysctls) == before
    assert kernel.release_kernel_settings(Path("/a"), record, sysctls) == []
    assert values(sysctls) == {"vm.overcommit_memory": "1", "kernel.panic": "10", "kernel.panic_on_oops": "1"}
    assert kernel.release_kernel_settings(Path("/b"), record, sysctls) == [
        "vm.overcommit_memory=0", "kernel.panic=0", "kernel.panic_on_oops=0"]
    assert values(sysctls) == before and not record.exists()
    # A cluster that held nothing (or a second down) changes nothing.
    kubelet_sets(sysctls)
    assert kernel.release_kernel_settings(Path("/a"), record, sysctls) == []
    assert values(sysctls)["kernel.panic"] == "10"
