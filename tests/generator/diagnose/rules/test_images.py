"""diagnose on recorded API objects: images that cannot be pulled."""
from __future__ import annotations

from generator.diagnose import rules
from tests.generator.diagnose.rules.shots import only, pod, shot


def test_the_operators_init_image_that_cannot_be_pulled_points_at_the_operator_chart():
    init = [{"name": "init-pytorch", "image": "alpine:3.10", "restartCount": 0, "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "alpine:3.10"'}}}]
    worker = pod("mnist-worker-0", "Worker", "Pending", statuses=[], init=init)
    found = only(rules.diagnose(shot(pods=[pod("mnist-master-0", "Master"), worker])), "ImagePullBackOff")
    assert found.object == "Pod/mnist-worker-0" and "`pytorchInitContainerImage`" in found.fix

def test_the_trainer_image_that_cannot_be_pulled_points_at_image_values():
    statuses = [{"name": "pytorch", "image": "ghcr.io/acme/trainer:nope", "restartCount": 0, "state": {"waiting": {
        "reason": "ErrImagePull", "message": "rpc error: code = NotFound desc = failed to pull and unpack image"}}}]
    found = only(rules.diagnose(shot(pods=[pod("mnist-master-0", "Master", "Pending", statuses=statuses)])), "ErrImagePull")
    assert "`image.repository`" in found.fix and "`image.pullSecrets`" in found.fix
