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
    """As root with apt-get, the node's start installs them from Debian's packages (build.host_packages)."""
    for machine in (replace(READY, runc=False), replace(READY, cni=False), replace(READY, runc=False, cni=False),
                    replace(READY, iptables=False)):
        assert support.why_not(machine) is None
        assert support.installs_packages(machine)


def test_gcc_is_needed_only_while_the_sandbox_image_is_unbuilt():
    assert support.why_not(replace(READY, gcc=False, pause_built=True)) is None


@pytest.mark.parametrize(("options", "reason"), [
    ({}, None),
    ({"cpu": "4"}, "--cpu sizes the process node; the real node offers this machine's CPUs and memory as its kubelet "
                   "measures them"),
    ({"memory": "8Gi", "gpus": 1}, "--memory and --gpus size the process node;"),
    ({"gpus": 1, "images": {"my/trainer": "host"}}, "--image my/trainer=host runs your code with this "
                                                    "machine's python, which only the process node does"),
    ({"images": {"my/trainer:1.0": "/home/me/project"}}, None),  # a folder is laid over an image the node pulls
])
def test_the_options_only_the_process_node_takes_are_the_reason_for_it(options, reason):
    said = support.process_only(options.get("cpu"), options.get("memory"), options.get("gpus", 0),
                                options.get("images", {}))
    assert said == reason if reason is None else said.startswith(reason)


def test_what_is_read_from_this_machine():
    machine = support.Machine.read()
    assert machine.euid == os.geteuid()
    assert [h for h, _ in machine.cgroups] == host.hierarchies()
    assert all(writable == os.access(h, os.W_OK) for h, writable in machine.cgroups)
