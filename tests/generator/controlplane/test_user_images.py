"""`cluster up --image` on the real node: the names the registry holds your images under, and
which of its images a KNOWN mapping copies."""
from __future__ import annotations

import pytest

from generator.controlplane import user_images
from generator.errors import UserError

HELD = {"ghcr.io/pytorchjob-kit/trainer:0.1.0": "localhost/trainer-cpu", "docker.io/library/alpine:3.10": "localhost/alpine",
        "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime": "localhost/torch"}


@pytest.mark.parametrize(("ref", "held"), [
    ("registry.example.com/ml/toy:1.0", "registry.example.com/ml/toy:1.0"),
    ("registry.example.com/ml/toy", "registry.example.com/ml/toy:latest"),  # as a pull reads a name without tag
    ("pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime", "docker.io/pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"),
    ("localhost:5000/ml/toy", "localhost:5000/ml/toy:latest"),  # a port is not a tag
])
def test_a_mapping_is_held_under_its_tag_else_latest_with_docker_hubs_name_written_out(ref, held):
    assert user_images.tagged(ref) == held


def test_known_copies_the_image_the_registry_holds_for_that_repository_and_names_the_others():
    assert user_images.known_image(HELD, "my/trainer", "ghcr.io/pytorchjob-kit/trainer") == "localhost/trainer-cpu"
    assert user_images.known_image(HELD, "my/shell", "alpine") == "localhost/alpine"
    assert user_images.torch_image(HELD) == "localhost/torch"
    with pytest.raises(UserError) as refused:
        user_images.known_image(HELD, "my/tools", "busybox")
    assert str(refused.value) == ("--image my/tools=busybox: the registry on this machine holds no image of busybox; name "
                                  "one of alpine, ghcr.io/pytorchjob-kit/trainer, pytorch/pytorch, or a folder")


def test_no_mapping_builds_and_pushes_nothing():
    assert user_images.publish(None, {}, HELD) == []
