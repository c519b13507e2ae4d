"""The pod network, for real: a bridge, two pods' network namespaces on it, each with its own IP
and the same port, reachable from this machine and from each other, and nothing left after."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from generator.controlplane import network

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="network namespaces need root and iproute2 (the local cluster needs them too)")

SERVE = "import http.server,socket,sys; s=http.server.HTTPServer(('0.0.0.0',8080),type('H',(http.server.BaseHTTPRequestHandler,)," \
        "{'do_GET':lambda h:(h.send_response(200),h.end_headers(),h.wfile.write(sys.argv[1].encode())),'log_message':lambda *a:None}));" \
        "print('up',flush=True); s.serve_forever()"


@pytest.fixture
def pods(tmp_path):
    net = network.PodNetwork.for_cluster(tmp_path)
    net.create()
    yield net
    net.delete()
    assert not net.sandboxes() and not Path(f"/sys/class/net/{net.bridge}").exists()


def serve(netns: Path, text: str) -> subprocess.Popen:
    proc = subprocess.Popen(["nsenter", f"--net={netns}", sys.executable, "-c", SERVE, text], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "up\n"
    return proc


def test_two_pods_listen_on_one_port_each_at_its_own_ip(pods):
    addresses = network.Addresses(pods)
    a, b = addresses.take("uid-a"), addresses.take("uid-b")
    assert (a, b) == (str(pods.subnet.network_address + 2), str(pods.subnet.network_address + 3))
    servers = [serve(pods.add_sandbox("uid-a", a), "pod a"), serve(pods.add_sandbox("uid-b", b), "pod b")]
    try:
        assert urllib.request.urlopen(f"http://{a}:8080/", timeout=5).read() == b"pod a"
        assert urllib.request.urlopen(f"http://{b}:8080/", timeout=5).read() == b"pod b"
        # Pod to pod, and pod to the gateway, where the API server listens.
        fetch = "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1],timeout=5).read().decode())"
        out = subprocess.run(["nsenter", f"--net={network.NETNS_DIR / pods.sandbox_name('uid-b')}", sys.executable, "-c",
                              fetch, f"http://{a}:8080/"], capture_output=True, text=True, timeout=30)
        assert out.stdout == "pod a\n", out.stderr
        route = subprocess.run(["ip", "-n", pods.sandbox_name("uid-a"), "route", "get", "192.0.2.7"], capture_output=True,
                               text=True).stdout
        assert f"via {pods.gateway}" in route
    finally:
        for s in servers:
            s.kill()
            s.wait()
    assert pods.sandboxes() == [pods.sandbox_name("uid-a"), pods.sandbox_name("uid-b")]
    pods.remove_sandbox("uid-a")
    addresses.give_back("uid-a")
    assert pods.sandboxes() == [pods.sandbox_name("uid-b")]
    assert addresses.take("uid-c") != a  # a freed address waits behind the others


def test_a_cluster_folder_keeps_its_bridge_and_avoids_routed_subnets(tmp_path, pods):
    assert network.PodNetwork.for_cluster(tmp_path) == pods  # its own route does not push it away
    other = network.PodNetwork.for_cluster(tmp_path / "other")
    assert other.bridge != pods.bridge and not other.subnet.overlaps(pods.subnet)
