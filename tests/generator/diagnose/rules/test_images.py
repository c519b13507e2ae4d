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


def test_an_image_the_local_clusters_registry_lacks_points_at_image_load_and_cluster_up_image():
    """On `cluster up`'s real node (its Node labelled so) the pull is from the registry on this machine."""
    statuses = [{"name": "pytorch", "image": "registry.example.com/ml/toy:2.0", "restartCount": 0, "state": {"waiting": {
        "reason": "ErrImagePull", "message": "failed to resolve reference: not found"}}}]
    failing = pod("mnist-master-0", "Master", "Pending", statuses=statuses, spec={"nodeName": "node-a"})
    local = {"metadata": {"name": "node-a", "labels": {"pytorchjob-kit/node": "real"}}, "spec": {},
             "status": {"allocatable": {"cpu": "2", "memory": "8Gi"}}}
    found = only(rules.diagnose(shot(pods=[failing], nodes=[local])), "ErrImagePull")
    assert found.fix.startswith("the local cluster's node pulls from the registry on this machine, which lacks "
                                "registry.example.com/ml/toy:2.0: put it there with `python -m generator image load "
                                "registry.example.com/ml/toy:2.0`")
    assert "`python -m generator cluster up --image registry.example.com/ml/toy:2.0=DIR[:PATH]`" in found.fix
    elsewhere = only(rules.diagnose(shot(pods=[failing])), "ErrImagePull")  # a node of any other cluster
    assert "registry on this machine" not in elsewhere.fix and "`image.repository`" in elsewhere.fix
