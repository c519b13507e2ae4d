"""--release and --namespace are checked as Helm and Kubernetes check them, before anything uses
them: a release such as `--set=...` never reaches a printed or executed helm command line."""
from __future__ import annotations

import pytest

from tests.support.cli_helpers import run

VALUES_COMMANDS = [["render"], ["validate"], ["run", "--dry-run"], ["values", "--name", "x", "--workers", "1"]]


@pytest.mark.parametrize("command", VALUES_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(("release", "why"), [
    ("--set=job.name=injected", "must be lower-case letters, digits and '-', in parts joined by '.'"),
    ("My_Job", "must be lower-case letters"),
    ("a" * 54, "is 54 characters, more than the 53 a release name may have"),
    ("job-", "starting and ending with a letter or digit"),
    ("job\n", "starting and ending with a letter or digit"),
])
def test_a_release_helm_would_refuse_is_refused_first(tmp_path, command, release, why):
    values = tmp_path / "values.yaml"
    values.write_text("{}\n")
    args = [*command, f"--release={release}"] + ([] if command[0] == "values" else [str(values)])
    code, out, err = run(*args)
    assert code == 2
    assert f"Invalid value for '--release': {release!r} " in err and why in err
    assert out == "" and "helm" not in err


@pytest.mark.parametrize("command", [["render", "VALUES"], ["run", "--dry-run", "VALUES"], ["status", "job"],
                                     ["logs", "job"], ["wait", "job"], ["delete", "job"], ["diagnose", "job"],
                                     ["submit", "VALUES"]], ids=lambda c: c[0])
def test_a_namespace_kubernetes_would_refuse_is_refused_before_any_call(tmp_path, command):
    values = tmp_path / "values.yaml"
    values.write_text("{}\n")
    args = [str(values) if a == "VALUES" else a for a in command]
    code, _, err = run(*args, "--namespace", "Research_Team")
    assert code == 2
    assert ("Invalid value for '-n' / '--namespace': 'Research_Team' must be lower-case letters, digits and '-', "
            "starting and ending with a letter or digit; for example `training`") in err


@pytest.mark.parametrize(("namespace", "why"), [
    ("team\n", "must be lower-case letters, digits and '-', starting and ending with a letter or digit"),
    ("team.a", "has a '.': a namespace is a DNS-1123 label, not a subdomain, so it is letters, digits and '-' alone"),
])
def test_a_namespace_with_a_final_newline_or_a_dot_is_refused(tmp_path, namespace, why):
    values = tmp_path / "values.yaml"
    values.write_text("{}\n")
    for flag in ("-n", "--namespace"):
        code, out, err = run("render", str(values), flag, namespace)
        assert code == 2 and out == ""
        assert f"Invalid value for '-n' / '--namespace': {namespace!r} {why}; for example `training`" in err


def test_a_name_in_values_that_ends_in_a_newline_is_refused_as_helm_refuses_it(tmp_path):
    """Helm's schema check reads `$` as the end of the text (Go); Python's `$` alone would take `demo\\n`."""
    values = tmp_path / "values.yaml"
    values.write_text('job: {name: "demo\\n"}\n')
    code, out, err = run("validate", str(values))
    assert code == 1 and "job.name: is not in the expected form (got 'demo\\n')" in out + err


def test_names_within_the_limits_pass(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("{}\n")
    code, out, err = run("render", str(values), "--release", "team-a1", "--namespace", "n" * 63)
    assert code == 0, err
    assert "kind: PyTorchJob" in out
