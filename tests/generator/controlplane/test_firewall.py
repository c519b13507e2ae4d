"""Another user of the machine (uid 65534) is refused by the cluster's pods and its CoreDNS from
`cluster up`'s pod network on, and reaches the API server's address (which asks for credentials);
`cluster down` takes the rule away with the rest. A real bridge, real listeners, real iptables."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading

import pytest

from generator.controlplane import firewall, network
from generator.controlplane.layout import Layout
from generator.controlplane.state import ClusterState, save
from tests.support.cli_helpers import run
from tests.support.reach import NOBODY, reach

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("iptables") or not shutil.which("setpriv"),
                                reason="a bridge and firewall rules need root, iptables and setpriv")

# A job's master in its pod: MASTER_PORT open to whoever connects.
POD_LISTENS = ("import socket\ns = socket.socket()\ns.bind(('0.0.0.0', 23456))\ns.listen()\nprint('listening', flush=True)\n"
               "while True:\n    s.accept()[0].close()\n")


def serve(kind: str, host: str, port: int) -> socket.socket:
    """A listener as a pod or CoreDNS would have: TCP accepts, UDP echoes."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    if kind == "tcp":
        s.listen()
    else:
        def echo():
            while True:
                try:
                    data, peer = s.recvfrom(10)
                except OSError:
                    return
                s.sendto(data, peer)
        threading.Thread(target=echo, daemon=True).start()
    return s


def add_pod(pods: network.PodNetwork, address: str) -> str:
    """A network namespace with eth0 at `address` on the cluster's bridge, as a pod has one: its name."""
    name, veth = f"{pods.bridge}-pod", f"{pods.bridge}v"
    for argv in (["netns", "add", name], ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name],
                 ["link", "set", veth, "master", pods.bridge, "up"],
                 ["-n", name, "addr", "add", f"{address}/{pods.subnet.prefixlen}", "dev", "eth0"],
                 ["-n", name, "link", "set", "eth0", "up"], ["-n", name, "link", "set", "lo", "up"],
                 ["-n", name, "route", "add", "default", "via", pods.gateway]):
        subprocess.run(["ip", *argv], check=True, capture_output=True)
    return name


@pytest.fixture
def cluster(tmp_path):
    """A cluster's folder with its pod network as `cluster up` makes it (bridge, and the firewall
    rule as bringup.pod_network adds it), a pod's address on it and listeners as root."""
    layout = Layout(tmp_path / "cluster")
    layout.create()
    with network.choosing():
        pods = network.PodNetwork.for_cluster(layout.root)
        pods.create()
    save(layout.state_file, ClusterState(phase="stopped", pod_network=pods))
    pod = str(pods.subnet.network_address + 200)
    sandbox = add_pod(pods, pod)  # a pod's own network namespace on the bridge
    master = subprocess.Popen(["ip", "netns", "exec", sandbox, "/usr/bin/python3", "-c", POD_LISTENS],
                              stdout=subprocess.PIPE, text=True)
    listeners = [serve("tcp", pods.gateway, 53), serve("udp", pods.gateway, 53), serve("tcp", pods.gateway, 0)]
    api = listeners[-1].getsockname()[1]
    try:
        assert master.stdout.readline() == "listening\n"
        yield layout, pods, [("tcp", pod, 23456), ("tcp", pods.gateway, 53), ("udp", pods.gateway, 53),
                             ("tcp", pods.gateway, api)]
    finally:
        master.kill()
        master.wait()
        for s in listeners:
            s.close()
        firewall.open_(pods.bridge)
        subprocess.run(["ip", "netns", "delete", sandbox], capture_output=True)  # its veth goes with it
        pods.delete()


def test_other_users_are_refused_by_the_pods_and_coredns_until_cluster_down(cluster):
    layout, pods, targets = cluster
    pod, dns_tcp, dns_udp, api = (f"{k} {h}:{p}" for k, h, p in targets)
    firewall.close(pods.bridge, pods.cidr)
    # A TCP connection is reset; a datagram is not sent (EPERM): refused at once, either way.
    assert reach(targets, NOBODY) == {pod: "ConnectionRefusedError", dns_tcp: "ConnectionRefusedError",
                                      dns_udp: "PermissionError", api: "answered"}
    assert set(reach(targets, 0).values()) == {"answered"}  # root: the API server, the kubelet and the supervisor
    code, out, err = run("cluster", "down", "--dir", str(layout.root))
    assert code == 0, err
    assert f"the firewall chain {firewall.chain(pods.bridge)} that kept other users from the cluster's pods (removed)" in out
    assert firewall.jumps(pods.bridge) == []
    assert subprocess.run(["iptables", "-w", "5", "-S", firewall.chain(pods.bridge)], capture_output=True).returncode != 0


def test_bringing_up_the_pod_network_closes_it_to_other_users(cluster):
    """The bring-up step itself, as the supervisor runs it."""
    from types import SimpleNamespace

    from generator.controlplane import bringup
    from generator.controlplane.state import NodeOptions

    layout, pods, targets = cluster
    saved = {}
    sup = SimpleNamespace(layout=layout, node=NodeOptions(), network=None, save=lambda **kw: saved.update(kw))
    bringup.pod_network(sup)
    assert saved["pod_network"] == pods and firewall.jumps(pods.bridge)
    assert reach(targets[:1], NOBODY) == {f"tcp {targets[0][1]}:{targets[0][2]}": "ConnectionRefusedError"}
