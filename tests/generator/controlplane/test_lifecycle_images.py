"""`cluster up --image` on a cluster that runs already: the node's image map is fixed when it
starts, so a mapping it lacks is refused with the way to get it, not silently ignored. The map is
read from the cluster's state, where the node step wrote it."""
from __future__ import annotations

import pytest

from generator.controlplane import lifecycle, state
from generator.controlplane.layout import Layout
from generator.controlplane.state import ClusterState, NodeOptions
from generator.errors import UserError


def test_a_mapping_the_running_node_has_passes_and_one_it_lacks_is_refused(tmp_path):
    layout = Layout(tmp_path)
    node = NodeOptions(images={"registry.example.com/ml/toy": str(tmp_path)})
    state.save(layout.state_file, ClusterState(phase="ready", node_options=node))
    running = state.load(layout.state_file)  # as `cluster up` reads it back
    lifecycle.same_images(layout, running, {"registry.example.com/ml/toy": str(tmp_path)})
    lifecycle.same_images(layout, running, {})
    with pytest.raises(UserError) as refused:
        lifecycle.same_images(layout, running, {"pytorch-cpu": "host"})
    assert str(refused.value) == (f"a cluster runs in {tmp_path} already, and its node was started without --image "
                                  "pytorch-cpu=host; a node's images are fixed when it starts: run `python -m generator "
                                  "cluster down`, then `cluster up` with every --image it needs")
    with pytest.raises(UserError, match="started without --image registry.example.com/ml/toy=/elsewhere;"):
        lifecycle.same_images(layout, running, {"registry.example.com/ml/toy": "/elsewhere"})


def test_a_state_that_has_not_kept_the_node_options_refuses_nothing(tmp_path):
    lifecycle.same_images(Layout(tmp_path), ClusterState(phase="ready"), {"pytorch-cpu": "host"})
