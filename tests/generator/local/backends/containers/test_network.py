"""`run --container`'s network takes a subnet nothing of this machine has, and a run's containers
are told apart from those a killed run left."""
import os
import subprocess
import sys

from generator.local.backends.containers import network as container_network


def test_the_network_takes_a_subnet_no_network_or_route_of_this_machine_has():
    assert container_network.free_subnet([]) == "10.89.0.0/24"
    assert container_network.free_subnet(["10.88.0.0/16", "10.89.0.0/24", "10.89.1.128/25", "fd00::/64"]) == "10.89.2.0/24"
    assert container_network.subnets_of([{"subnets": [{"subnet": "10.89.5.0/24"}]},
                                       {"IPAM": {"Config": [{"Subnet": "172.18.0.0/16"}]}}]) == ["10.89.5.0/24", "172.18.0.0/16"]
    assert all("/" in r for r in container_network.routes())


def test_what_a_killed_run_left_is_told_from_a_run_still_going():
    assert container_network.alive(container_network.token())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = container_network.token(child.pid)
    child.wait()
    assert owner and not container_network.alive(owner)
    assert not container_network.alive(f"{os.getpid()}-1")  # the pid reused by a later process
