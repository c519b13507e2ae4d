"""Whether the real node can run on a machine, and if not, the reason `cluster up` gives with what to
change: each check on a machine that has everything but one thing, and what is read from this one."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from generator.controlplane.realnode import host, support

READY = support.Machine(euid=0, runc=True, cni=True, apt_get=True,
                        cgroups=((Path("/sys/fs/cgroup/memory"), True), (Path("/sys/fs/cgroup/unified"), True)),
                        iptables=True, gcc=True, pause_built=False)


def test_a_machine_with_everything_runs_the_real_node():
    assert support.why_not(READY) is None
    assert not support.installs_packages(READY)


@pytest.mark.parametrize(("lacking", "reason"), [
    ({"euid": 1000}, "the real node needs root (containerd, runc, the node's cgroups and mounts), and this runs as uid "
                     "1000: run it as root"),
    ({"runc": False, "apt_get": False},
     "the real node needs runc, and apt-get is not here to install them: install runc and containernetworking-plugins "
     "and iptables"),
    ({"runc": False, "cni": False, "apt_get": False}, "the real node needs runc and the CNI plugins (bridge, host-local, "
                                                      "loopback, portmap in one of /usr/lib/cni, /opt/cni/bin), and"),
    ({"cgroups": ()}, "the real node puts its pods in cgroups, and no cgroup hierarchy is mounted here "
                      "(/proc/self/mounts): mount one (cgroup2 on /sys/fs/cgroup)"),
    ({"cgroups": ((Path("/sys/fs/cgroup/memory"), False), (Path("/sys/fs/cgroup/unified"), True))},
     "the real node makes its cgroup in every cgroup hierarchy, and /sys/fs/cgroup/memory is not writable (mounted "
     "read-only, as in an unprivileged container): run it where the cgroups are writable"),
    ({"cgroups": ((Path("/a"), False), (Path("/b"), False))}, "and /a, /b are not writable"),
    ({"iptables": False, "apt_get": False},
     "the real node needs iptables, with which kube-proxy writes Services' rules, and apt-get is not here to install "
     "them: install runc and containernetworking-plugins and iptables"),
    ({"gcc": False}, "the real node's sandbox image is built with gcc -static, and gcc is not on PATH: install it "
                     "(`apt-get install -y gcc libc6-dev`)"),
])
def test_each_thing_the_real_node_lacks_is_named_with_the_fix(lacking, reason):
    assert reason in support.why_not(replace(READY, **lacking))


def test_not_root_is_the_reason_before_what_root_would_install():
    machine = replace(READY, euid=1000, runc=False)
    assert support.why_not(machine).startswith("the real node needs root")
    assert not support.installs_packages(machine)


def test_runc_iptables_and_the_cni_plugins_missing_are_no_reason_where_the_build_installs_them():
    """As root with apt-get, the node's start installs them from Debian's packages (packaged.install)."""
    for machine in (replace(READY, runc=False), replace(READY, cni=False), replace(READY, runc=False, cni=False),
                    replace(READY, iptables=False)):
        assert support.why_not(machine) is None
        assert support.installs_packages(machine)


def test_gcc_is_needed_only_while_the_sandbox_image_is_unbuilt():
    assert support.why_not(replace(READY, gcc=False, pause_built=True)) is None


def test_only_run_takes_host_images_and_the_refusal_gives_the_folder_form():
    assert support.hosted_image({"my/trainer:1.0": "/home/me/project"}) is None  # a folder is laid over an image
    said = support.hosted_image({"my/trainer": "host", "a/b": "host"})
    assert said.startswith("--image a/b=host runs your code with this machine's python, which only `generator run` does")
    assert "`--image a/b=DIR[:PATH]`" in said and "`python -m generator image load IMAGE`" in said


MACHINE = support.Capacity(cpus=2, memory=24 * 2**30)


@pytest.mark.parametrize(("cpu", "memory", "reserved"), [
    (None, None, {}),
    ("1", None, {"cpu": "1000m"}),
    ("1500m", None, {"cpu": "500m"}),
    ("2", None, {}),  # the whole machine: nothing reserved
    (None, "8Gi", {"memory": str(16 * 2**30 - 100 * 2**20)}),  # allocatable = capacity - reserved - eviction
    ("500m", "24476Mi", {"cpu": "1500m"}),  # all the memory there is, less the eviction threshold
])
def test_the_kubelet_reserves_what_leaves_the_asked_allocatable(cpu, memory, reserved):
    from generator.controlplane.state import NodeOptions

    assert support.system_reserved(NodeOptions(cpu=cpu, memory=memory), MACHINE) == reserved


@pytest.mark.parametrize(("cpu", "memory", "said"), [
    ("2001m", None, "--cpu 2001m: the node's allocatable can be at most what this machine has, 2 CPUs"),
    (None, "24Gi", "--memory 24Gi: the node's allocatable can be at most what this machine has, 24476Mi (its 24576Mi "
                   "less the kubelet's eviction threshold of 100Mi)"),
])
def test_more_than_the_machine_has_is_refused_naming_the_most_and_kueues_quota(cpu, memory, said):
    from generator.controlplane.state import NodeOptions
    from generator.errors import UserError

    with pytest.raises(UserError) as refused:
        support.system_reserved(NodeOptions(cpu=cpu, memory=memory), MACHINE)
    assert str(refused.value).startswith(said)
    assert str(refused.value).endswith("use `--kueue --kueue-quota cpu=...,memory=...`")


def test_what_is_read_from_this_machine():
    machine = support.Machine.read()
    assert machine.euid == os.geteuid()
    assert [h for h, _ in machine.cgroups] == host.hierarchies()
    assert all(writable == os.access(h, os.W_OK) for h, writable in machine.cgroups)
