"""Strings reach the rendered objects as strings, whatever they hold: the templates quote what
they print, and the schema refuses what Kubernetes would refuse as a name."""
import shutil

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from generator import helm, paths
from tests.support.cli_helpers import run

HOSTILE = ["default\n    hostNetwork: true\n    hostPID: true", "on", "yes", "null", "0x1f", "1e3", "a: b", "#x", "[a]",
           "'quoted'", '"dq"', "{x: 1}", "~", "- item"]
# values path -> where the rendered PyTorchJob's Master pod shows it
PRINTED = {
    ("serviceAccountName",): lambda pod, job: pod["serviceAccountName"],
    ("priorityClassName",): lambda pod, job: pod["priorityClassName"],
    ("kueue", "queueName"): lambda pod, job: job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
    ("image", "pullSecrets"): lambda pod, job: pod["imagePullSecrets"][0]["name"],
    ("image", "pullPolicy"): lambda pod, job: pod["containers"][0]["imagePullPolicy"],
    ("restartPolicy",): lambda pod, job: job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"],
}


@pytest.fixture(scope="module")
def unguarded_chart(tmp_path_factory):
    """The job chart without its schema: what the templates alone do with any string."""
    chart = tmp_path_factory.mktemp("chart") / "pytorchjob"
    shutil.copytree(paths.JOB_CHART, chart)
    (chart / "values.schema.json").unlink()
    return chart


def _values(path: tuple, text: str) -> dict:
    value: object = [text] if path == ("image", "pullSecrets") else text
    for key in reversed(path):
        value = {key: value}
    return value


@pytest.mark.parametrize("path", PRINTED, ids=".".join)
@pytest.mark.parametrize("text", HOSTILE)
def test_templates_print_any_string_as_that_string(unguarded_chart, path, text):
    objects = helm.render_objects(unguarded_chart, _values(path, text), "release", "default")
    job = next(o for o in objects if o["kind"] == "PyTorchJob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert PRINTED[path](pod, job) == text
    assert "hostNetwork" not in pod and "hostPID" not in pod


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40))
def test_any_service_account_name_round_trips_or_is_refused(text):
    """Names the schema lets through render unchanged; the rest never reach a template."""
    from generator import kinds
    from generator.job import validation

    checked = validation.check_values({"serviceAccountName": text}, kinds.PYTORCHJOB)
    if checked.findings:
        assert checked.findings[0].path == "serviceAccountName"
    else:
        pod = checked.job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        assert pod["serviceAccountName"] == text


@pytest.mark.parametrize("field", ["serviceAccountName", "priorityClassName", "nameOverride", "fullnameOverride"])
def test_validate_names_the_field_of_an_injected_line(tmp_path, field):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({field: "default\n    hostNetwork: true"}))
    code, _, err = run("validate", str(values))
    assert code == 1 and f"{field}: is not in the expected form" in err


def test_both_charts_share_their_name_patterns():
    import json

    job = json.loads((paths.JOB_CHART / "values.schema.json").read_text())["definitions"]
    operator = json.loads((paths.OPERATOR_CHART / "values.schema.json").read_text())["definitions"]
    for name in ("dnsSubdomainOrEmpty", "dnsLabelOrEmpty", "imageRepository"):
        assert operator[name] == job[name], f"{name} differs between the charts' schemas: copy it over"
