"""Where the trainer writes is one fact, trainer/config.py's (OUTPUT_ENV, DEFAULT_OUTPUT_DIR): the
generator imports it; the chart and the Dockerfile cannot, so these tests read them and fail when
either drifts (an image folder the chart does not mount over, a variable the trainer never reads)."""
import json
import re

import pytest
import yaml

from generator import helm, paths
from generator.container import command
from tests.support import ROOT
from trainer import config

DOCKERFILE = ROOT / "trainer" / "Dockerfile"


def _dockerfile() -> str:
    return DOCKERFILE.read_text().replace("\\\n", " ")


def test_the_image_makes_the_default_output_folder_and_gives_it_to_the_trainers_user():
    text = _dockerfile()
    assert re.search(rf"mkdir -p {re.escape(config.DEFAULT_OUTPUT_DIR)}(\s|$)", text), "the image lacks the folder"
    assert re.search(rf"chown 1000:1000 {re.escape(config.DEFAULT_OUTPUT_DIR)}(\s|$)", text), "uid 1000 cannot write it"
    assert re.search(r"^USER 1000:1000$", text, re.MULTILINE)


def test_the_generator_runs_the_images_entrypoint():
    """`generator run` starts what the image's ENTRYPOINT starts when a pod gives no command."""
    (entrypoint,) = re.findall(r"^ENTRYPOINT (\[.*\])$", _dockerfile(), re.MULTILINE)
    assert tuple(json.loads(entrypoint)) == command.ENTRYPOINT


def test_the_charts_output_volume_mounts_over_the_default_and_says_so_through_the_variable():
    default = yaml.safe_load((paths.JOB_CHART / "values.yaml").read_text())["output"]["mountPath"]
    assert default == config.DEFAULT_OUTPUT_DIR
    job = next(o for o in helm.render_objects(paths.JOB_CHART, {"output": {"enabled": True}}) if o["kind"] == "PyTorchJob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (main,) = [c for c in pod["containers"] if c["name"] == "pytorch"]
    assert {"name": config.OUTPUT_ENV, "value": config.DEFAULT_OUTPUT_DIR} in main["env"]
    assert {"name": "output", "mountPath": config.DEFAULT_OUTPUT_DIR} in main["volumeMounts"]


@pytest.mark.parametrize("given", [None, "/mnt/results"])
def test_the_trainer_reads_the_variable_the_chart_sets(given, monkeypatch):
    if given:
        monkeypatch.setenv(config.OUTPUT_ENV, given)
    else:
        monkeypatch.delenv(config.OUTPUT_ENV, raising=False)
    assert config.parse([]).output_dir == (given or config.DEFAULT_OUTPUT_DIR)
