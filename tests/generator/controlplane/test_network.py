"""The pod network, for real: a bridge of the cluster's own, a /24 no route of this machine
covers, and nothing left after."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from generator.controlplane import network

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="network namespaces need root and iproute2 (the local cluster needs them too)")


@pytest.fixture
def pods(tmp_path):
    net = network.PodNetwork.for_cluster(tmp_path)
    net.create()
    yield net
    net.delete()
    assert not Path(f"/sys/class/net/{net.bridge}").exists()


def test_a_cluster_folder_keeps_its_bridge_and_avoids_routed_subnets(tmp_path, pods):
    assert network.PodNetwork.for_cluster(tmp_path) == pods  # its own route does not push it away
    other = network.PodNetwork.for_cluster(tmp_path / "other")
    assert other.bridge != pods.bridge and not other.subnet.overlaps(pods.subnet)
