"""Which images run on this machine (the process node and `generator run`), and how the rest are refused."""
from __future__ import annotations

import pytest
import yaml

from generator import paths
from generator.local import programs


@pytest.mark.parametrize(("image", "repository"), [
    ("alpine:3.10", "alpine"),
    ("docker.io/library/alpine:3.10", "alpine"),
    ("busybox", "busybox"),
    ("ghcr.io/pytorchjob-kit/trainer:0.1.0", "ghcr.io/pytorchjob-kit/trainer"),
    ("ghcr.io/pytorchjob-kit/trainer@sha256:" + "a" * 64, "ghcr.io/pytorchjob-kit/trainer"),
    ("localhost:5000/team/trainer:v2", "localhost:5000/team/trainer"),
    ("localhost:5000/team/trainer", "localhost:5000/team/trainer"),
])
def test_repository_drops_tag_digest_and_docker_hubs_prefixes(image, repository):
    assert programs.repository(image) == repository


def test_the_known_images_are_the_charts_own():
    job = yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())
    operator = yaml.safe_load((paths.OPERATOR_CHART / "values.yaml").read_text())
    assert programs.of("trainer").repository == job["image"]["repository"]
    assert programs.of("operator").repository == operator["image"]["repository"]
    assert programs.of("init").repository == programs.repository(operator["pytorchInitContainerImage"])
    assert programs.resolve("ghcr.io/pytorchjob-kit/trainer:any-tag").entrypoint == ("python", "-m", "trainer")


def test_an_unknown_image_is_refused_naming_what_runs_and_the_way_out():
    with pytest.raises(programs.ImagePullError) as refused:
        programs.resolve("example.com/team/app:1.0")
    message = str(refused.value)
    assert message.startswith('image "example.com/team/app:1.0" cannot run on this machine')
    assert "ghcr.io/pytorchjob-kit/trainer (python -m trainer from" in message
    assert "`--image example.com/team/app=<one of them>` (to `cluster up` or `run`)" in message


def test_an_alias_runs_a_copy_as_the_image_it_copies():
    program = programs.resolve("registry.example.com/ml/trainer:7", {"registry.example.com/ml/trainer": programs.of("trainer").repository})
    assert program.role == "trainer"
