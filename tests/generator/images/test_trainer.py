"""The trainer's image is named as the job chart names it, and VARIANT=cpu says plainly when
PyTorch's CPU index cannot be reached from here."""
import pytest
import yaml

from generator import paths
from generator.errors import UserError
from generator.images import trainer


def test_the_image_is_named_by_the_charts_repository_and_app_version():
    chart = yaml.safe_load((paths.JOB_CHART / "Chart.yaml").read_text())
    repository = yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())["image"]["repository"]
    assert trainer.reference("cpu") == f"{repository}:{chart['appVersion']}"
    assert trainer.reference("gpu") == f"{repository}:{chart['appVersion']}-cuda"


def test_the_cpu_variant_is_built_where_its_index_answers_and_refused_with_the_way_out_where_not():
    said: list[str] = []
    why = trainer.unreachable(trainer.cpu_index())
    if not why:
        assert trainer.choose("cpu") == trainer.choose("auto", said.append) == "cpu" and said == []
        return
    with pytest.raises(UserError) as refused:
        trainer.choose("cpu")
    message = refused.value.describe()
    assert f"VARIANT=cpu installs torch from PyTorch's CPU wheel index {trainer.cpu_index()}, which this machine " \
           f"cannot reach ({why})" in message and "`make image VARIANT=gpu`" in message
    assert trainer.choose("auto", said.append) == "gpu" and "building the CUDA variant from PyPI" in said[0]


def test_an_index_that_does_not_answer_is_told_why():
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert "refused" in trainer.unreachable(f"http://127.0.0.1:{port}/whl/cpu").lower()
