"""The kernel settings the real node's kubelet sets machine-wide are put back by the last cluster
down, to the values from before the first cluster's kubelet (on a folder laid out as /proc/sys)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from generator.controlplane.realnode import kernel

# This machine's kind of values before any kubelet, and what the kubelet (protectKernelDefaults: false)
# writes: setupKernelTunables in the kubelet's pkg/kubelet/cm/container_manager_linux.go.
BEFORE = {"vm.overcommit_memory": "0", "vm.panic_on_oom": "2", "kernel.panic": "0", "kernel.panic_on_oops": "0",
          "kernel.keys.root_maxkeys": "200", "kernel.keys.root_maxbytes": "20000"}
KUBELET = {"vm.overcommit_memory": "1", "vm.panic_on_oom": "0", "kernel.panic": "10", "kernel.panic_on_oops": "1",
           "kernel.keys.root_maxkeys": "1000000", "kernel.keys.root_maxbytes": "25000000"}


def write(folder: Path, settings: dict[str, str]) -> None:
    for name, value in settings.items():
        path = folder / name.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")


@pytest.fixture
def sysctls(tmp_path) -> Path:
    """A folder laid out as /proc/sys, holding the six settings as this machine's kind has them."""
    write(tmp_path / "sys", BEFORE)
    return tmp_path / "sys"


@pytest.fixture
def clusters(tmp_path) -> tuple[Path, Path]:
    """Two clusters' folders: a record's holder counts only while its folder is there."""
    folders = tmp_path / "a", tmp_path / "b"
    for folder in folders:
        folder.mkdir()
    return folders


def values(folder: Path) -> dict[str, str]:
    return {n: (folder / n.replace(".", "/")).read_text().strip() for n in kernel.KERNEL_SETTINGS}


def test_the_kubelets_six_settings_are_recorded():
    assert set(kernel.KERNEL_SETTINGS) == set(KUBELET)


def test_the_last_cluster_down_puts_back_the_settings_from_before_the_first_kubelet(tmp_path, sysctls, clusters):
    a, b = clusters
    record = tmp_path / "run" / "kernel-settings.json"
    assert kernel.hold_kernel_settings(a, record, sysctls) == BEFORE
    write(sysctls, KUBELET)
    # A second cluster records nothing new: the values are the first one's.
    assert kernel.hold_kernel_settings(b, record, sysctls) == BEFORE
    assert kernel.release_kernel_settings(a, record, sysctls) == []
    assert values(sysctls) == KUBELET
    assert sorted(kernel.release_kernel_settings(b, record, sysctls)) == sorted(f"{n}={v}" for n, v in BEFORE.items())
    assert values(sysctls) == BEFORE and not record.exists()
    # A cluster that held nothing (or a second down) changes nothing.
    write(sysctls, KUBELET)
    assert kernel.release_kernel_settings(a, record, sysctls) == []
    assert values(sysctls) == KUBELET


def test_a_cluster_whose_folder_is_gone_holds_the_settings_no_more(tmp_path, sysctls, clusters):
    """Its folder deleted without `cluster down`: the other cluster's down puts the settings back."""
    a, b = clusters
    record = tmp_path / "run" / "kernel-settings.json"
    kernel.hold_kernel_settings(a, record, sysctls)
    write(sysctls, KUBELET)
    kernel.hold_kernel_settings(b, record, sysctls)
    shutil.rmtree(a)
    assert kernel.release_kernel_settings(b, record, sysctls)
    assert values(sysctls) == BEFORE and not record.exists()


def test_a_record_all_of_whose_holders_are_gone_keeps_the_values_from_before(tmp_path, sysctls, clusters):
    """The next cluster finds the kubelet's values set: the record's, from before, are the ones to put back."""
    a, b = clusters
    record = tmp_path / "run" / "kernel-settings.json"
    kernel.hold_kernel_settings(a, record, sysctls)
    write(sysctls, KUBELET)
    shutil.rmtree(a)
    assert kernel.hold_kernel_settings(b, record, sysctls) == BEFORE
    kernel.release_kernel_settings(b, record, sysctls)
    assert values(sysctls) == BEFORE


def test_a_kernel_without_keys_records_the_settings_it_has(tmp_path, sysctls, clusters):
    shutil.rmtree(sysctls / "kernel" / "keys")
    record = tmp_path / "run" / "kernel-settings.json"
    assert set(kernel.hold_kernel_settings(clusters[0], record, sysctls)) == set(BEFORE) - {
        "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}
