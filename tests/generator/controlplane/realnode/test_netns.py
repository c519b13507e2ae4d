"""Several nodes on one bridge: each its namespace, veth, address and block of pod addresses, and a
route to every other node's block, so pods on different nodes reach each other directly."""
from __future__ import annotations

import pytest

from generator.controlplane.realnode import folder_name, netns, node_names
from generator.controlplane.realnode.netns import NodeNetwork


def test_one_node_keeps_the_upper_half_of_the_clusters_24_and_routes_nothing_else():
    one = NodeNetwork("pjk0000", "10.244.7.0/24")
    assert (one.name, one.host_veth, one.address) == ("pjk0000-node", "pjk0000n", "10.244.7.2")
    assert (one.pod_cidr, one.pod_gateway, one.pods_cidr) == ("10.244.7.128/25", "10.244.7.129", "10.244.7.128/25")
    assert one.routes() == []


def test_three_nodes_split_the_pods_half_and_route_each_others_blocks_over_the_bridge():
    nodes = [NodeNetwork("pjk0000", "10.244.7.0/24", i, 3) for i in range(3)]
    assert [n.pod_cidr for n in nodes] == ["10.244.7.128/27", "10.244.7.160/27", "10.244.7.192/27"]
    assert [n.address for n in nodes] == ["10.244.7.2", "10.244.7.3", "10.244.7.4"]
    assert [n.name for n in nodes] == ["pjk0000-node", "pjk0000-node2", "pjk0000-node3"]
    assert [n.host_veth for n in nodes] == ["pjk0000n", "pjk0000n2", "pjk0000n3"]
    assert nodes[1].routes() == [("10.244.7.128/27", "10.244.7.2"), ("10.244.7.192/27", "10.244.7.4")]
    assert {n.pods_cidr for n in nodes} == {"10.244.7.128/25"}  # kube-proxy's clusterCIDR: every node's pods


@pytest.mark.parametrize("count", range(1, netns.MAX_NODES + 1))
def test_every_count_of_nodes_gets_blocks_that_do_not_overlap_and_interface_names_linux_takes(count):
    blocks = netns.pod_blocks("10.244.7.0/24", count)
    assert len(blocks) == count and not any(a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    assert all(b.num_addresses >= 16 for b in blocks)
    assert all(len(NodeNetwork("pjk01234567", "10.244.7.0/24", i, count).host_veth) <= 15 for i in range(count))


def test_nodes_are_named_after_the_first_and_keep_their_folders_by_place():
    assert node_names("box", 3) == ("box", "box-node2", "box-node3")
    assert node_names("box", 1) == ("box",)
    assert all(len(n) <= 63 for n in node_names("x" * 63, 8))
    assert [folder_name(i) for i in range(3)] == ["node", "node2", "node3"]
