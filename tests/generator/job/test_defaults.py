"""defaults.coalesce claims Helm's rules for laying values over the chart's defaults: checked
against Helm itself, through a chart that prints the values its templates see."""
import json
import shutil

import pytest

from generator import helm, paths
from generator.job import defaults

CASES = {
    "empty": {},
    "nested scalar": {"topology": {"workers": 3}, "resources": {"requests": {"cpu": "2"}}},
    "null removes a default key": {"resources": {"requests": {"memory": None}}},
    "null removes a whole map": {"shm": None, "podSecurityContext": None},
    "map replaces list": {"tolerations": [{"key": "a", "operator": "Exists"}]},
    "new key under an empty map": {"nodeSelector": {"pool": "gpu"}},
    "deep nulls and values together": {"elasticPolicy": {"enabled": True, "maxReplicas": 4, "rdzvBackend": None}},
}


@pytest.fixture(scope="module")
def echo_chart(tmp_path_factory):
    chart = tmp_path_factory.mktemp("echo") / "pytorchjob"
    (chart / "templates").mkdir(parents=True)
    shutil.copy(paths.JOB_CHART / "Chart.yaml", chart / "Chart.yaml")
    shutil.copy(paths.JOB_CHART / "values.yaml", chart / "values.yaml")
    (chart / "templates" / "values.yaml").write_text("{{ toJson .Values }}\n")
    return chart


@pytest.mark.parametrize("user", CASES.values(), ids=CASES.keys())
def test_coalesce_gives_what_helm_gives_the_templates(echo_chart, user):
    (text,) = helm.render(echo_chart, user).values()
    assert defaults.coalesce(user) == json.loads(text)
