"""Which of the operator chart's images, as a user's values name them, the registry on this machine
lacks: the real node's `cluster up -f` refuses those before anything starts. The chart is rendered
for real; the registry answers from a list of what it holds."""
from __future__ import annotations

from generator import paths
from generator.controlplane import chart_images


class Holding:
    """A registry that holds exactly `names` (repository:tag, as pushed)."""

    def __init__(self, *names: str):
        self.names = set(names)

    def has(self, name: str) -> str:
        return "sha256:0" if name in self.names else ""


def chart_images_held() -> Holding:
    return Holding(*(chart_images.base.qualified(i) for i in chart_images._images(
        chart_images.helm.render_objects(paths.OPERATOR_CHART, {}))))


def test_the_charts_own_images_held_leave_nothing_lacking():
    assert chart_images.not_held(chart_images_held(), {}) == []
    assert chart_images.not_held(Holding(), {}) == ["docker.io/library/alpine:3.10",
                                                    "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"]


def test_the_init_containers_image_is_checked_as_docker_would_name_it():
    values = {"pytorchInitContainerImage": "busybox:1.36"}
    assert chart_images.not_held(chart_images_held(), values) == ["docker.io/library/busybox:1.36"]


def test_a_mirror_of_the_operator_the_registry_lacks_is_named_as_the_pod_would_pull_it():
    everything_else = chart_images_held()
    values = {"image": {"repository": "registry.example.com/mirror/training-operator", "tag": "v1"}}
    assert chart_images.not_held(everything_else, values) == ["registry.example.com/mirror/training-operator:v1"]
    everything_else.names.add("registry.example.com/mirror/training-operator:v1")
    assert chart_images.not_held(everything_else, values) == []


def test_cluster_up_f_refuses_an_operator_image_the_registry_lacks_naming_it_and_how_to_load_it():
    """`cluster up -f`, before the supervisor starts: a refusal in seconds, not a
    timeout's wait for an operator whose image can never be pulled."""
    from generator.controlplane import lifecycle
    from generator.errors import UserError

    values = {"image": {"repository": "registry.example.com/mirror/training-operator", "tag": "v1"}}
    everything_else = chart_images_held()
    try:
        lifecycle._check_held(everything_else, "operator.yaml", values)
    except UserError as refused:
        message = str(refused)
    else:
        raise AssertionError("an operator image the registry lacks was let through")
    assert message.startswith("-f operator.yaml: the node pulls registry.example.com/mirror/training-operator:v1 "
                              "from the registry on this machine, which does not hold it")
    assert "`python -m generator image load registry.example.com/mirror/training-operator:v1`" in message
    everything_else.names.add("registry.example.com/mirror/training-operator:v1")
    lifecycle._check_held(everything_else, "operator.yaml", values)  # held: nothing to refuse
    lifecycle._check_held(chart_images_held(), "operator.yaml", {})
