"""`cluster up --image` on a cluster that runs already: the node's image map is fixed when it
starts, so a mapping it lacks is refused with the way to get it, not silently ignored."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from generator.controlplane import lifecycle
from generator.controlplane.layout import Layout
from generator.controlplane.state import ClusterState, NodeOptions, Process
from generator.errors import UserError
from tests.support.waiting import wait_for


@pytest.fixture
def node(tmp_path):
    """A stand-in kubelet: a process whose command line carries --node as the supervisor writes it."""
    options = NodeOptions(images={"registry.example.com/ml/toy": str(tmp_path)})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--node={options.encode()}"])
    # Until it execs, the child's command line is still this test's.
    wait_for(lambda: b"--node=" in Path(f"/proc/{proc.pid}/cmdline").read_bytes(), 30, "the stand-in kubelet to start")
    yield ClusterState(phase="ready", processes={"kubelet": Process(proc.pid, "")})
    proc.kill()
    proc.wait()


def test_a_mapping_the_running_node_has_passes_and_one_it_lacks_is_refused(node, tmp_path):
    assert lifecycle.node_images(node) == {"registry.example.com/ml/toy": str(tmp_path)}
    lifecycle.same_images(Layout(tmp_path), node, {"registry.example.com/ml/toy": str(tmp_path)})
    lifecycle.same_images(Layout(tmp_path), node, {})
    with pytest.raises(UserError) as refused:
        lifecycle.same_images(Layout(tmp_path), node, {"pytorch-cpu": "host"})
    assert str(refused.value) == (f"a cluster runs in {tmp_path} already, and its node was started without --image "
                                  "pytorch-cpu=host; a node's images are fixed when it starts: run `python -m generator "
                                  "cluster down`, then `cluster up` with every --image it needs")


def test_a_node_whose_command_line_cannot_be_read_refuses_nothing(tmp_path):
    gone = ClusterState(phase="ready", processes={"kubelet": Process(2**22 + 7, "")})
    assert lifecycle.node_images(gone) is None
    lifecycle.same_images(Layout(tmp_path), gone, {"pytorch-cpu": "host"})
