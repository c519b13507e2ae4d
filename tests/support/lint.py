"""`make lint`: the one chart-linting entry point for any CI.

1. helm lint --strict of both charts (the helm CLI with every scenario's values once it is built): no
   errors, no warnings;
2. the values schemas: valid draft-07, the top-level copy identical, the defaults valid;
3. every scenario's rendered objects against Kubernetes' schemas (strict) and the operator's rules;
4. checkov's Kubernetes checks on the operator chart; each failing check must be explained in
   charts/pytorch-operator/README.md's security section;
5. ruff (pyflakes, pycodestyle, import order, bugbear) and vulture (dead code) over the Python.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import yaml

from generator import paths
from tests.support import kube, scenarios


def helm_cli() -> str | None:
    """The helm CLI `generator cluster build` made, else one on PATH."""
    from generator.controlplane import build, pins

    built = build.binary(pins.HELM_BINARY)
    return str(built) if built.is_file() else shutil.which("helm")


def helm_lint(chart: Path) -> list[str]:
    """With the helm CLI: once per scenario's values. Without it: the SDK's lint of the defaults."""
    binary = helm_cli()
    if binary:
        out = []
        with tempfile.TemporaryDirectory() as tmp:
            chart_name = next(k for k, v in scenarios.CHARTS.items() if v == chart)
            for name in scenarios.names(chart_name):
                values = Path(tmp) / f"{name}.yaml"
                values.write_text(yaml.safe_dump(scenarios.values(chart_name, name)))
                proc = subprocess.run([binary, "lint", "--strict", str(chart), "-f", str(values)], capture_output=True,
                                      text=True)
                if proc.returncode:
                    out.append(f"{name}: {proc.stdout + proc.stderr}")
        return out
    import helm_python

    report = helm_python.lint(str(chart), strict=True)
    return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2] + report["errors"]


def schema_problems() -> list[str]:
    out = []
    if (paths.ROOT / "values.schema.json").resolve() != paths.SCHEMA.resolve():
        out.append("values.schema.json is not a link to charts/pytorchjob/values.schema.json")
    for chart in scenarios.CHARTS.values():
        schema = json.loads((chart / "values.schema.json").read_text())
        try:
            jsonschema.Draft7Validator.check_schema(schema)
            jsonschema.Draft7Validator(schema).validate(yaml.safe_load((chart / "values.yaml").read_text()))
        except jsonschema.exceptions.SchemaError as exc:
            out.append(f"{chart.name}/values.schema.json: {exc.message}")
        except jsonschema.ValidationError as exc:
            out.append(f"{chart.name}/values.yaml does not meet its schema: {exc.message}")
    return out


def scenario_problems() -> list[str]:
    out = []
    for chart, name in scenarios.all_cases():
        for obj in scenarios.render_objects(chart, name):
            out += [f"{chart}/{name}: {p}" for p in kube.problems(obj)]
    return out


def explained_checks() -> set[str]:
    readme = (paths.OPERATOR_CHART / "README.md").read_text()
    section = readme.split("## Security scan", 1)[-1]
    return set(re.findall(r"\b(CKV2?_K8S_\d+)\b", section))


def checkov_failures() -> tuple[set[str], list[str]]:
    binary = os.environ.get("CHECKOV") or shutil.which("checkov")
    if not binary:
        return set(), ["checkov is not installed: run `make lint`, which installs it in .venv/checkov"]
    failed: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name in scenarios.names("pytorch-operator"):
            (Path(tmp) / f"{name}.yaml").write_text(scenarios.render_stream("pytorch-operator", name))
        proc = subprocess.run([binary, "--quiet", "--compact", "--framework", "kubernetes", "--output", "json",
                               "--directory", tmp], capture_output=True, text=True)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return set(), [f"checkov did not produce a report: {proc.stderr.strip()[-400:]}"]
    for block in report if isinstance(report, list) else [report]:
        for check in block.get("results", {}).get("failed_checks", []):
            failed.add(check["check_id"])
    return failed, []


PYTHON_TREES = ["generator", "trainer", "tests"]
# Names only a framework calls: click's group hooks, http.server's handlers, nn.Module.forward,
# pytest's module marks and hooks, signal handlers' fixed parameters.
FRAMEWORK_NAMES = ["list_commands", "get_command", "format_commands", "do_*", "log_message", "protocol_version", "server_version",
                   "daemon_threads", "forward", "pytestmark", "pytest_*", "frame", "debug", "retries", "ignore_aliases", "indentless",
                   "mtime", "yaml_constructors"]  # tarfile's and PyYAML's attributes, read by them


def code_problems() -> list[str]:
    out = []
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "--quiet", *PYTHON_TREES], cwd=paths.ROOT,
                          capture_output=True, text=True)
    if ruff.returncode:
        out.append("ruff:\n" + ruff.stdout + ruff.stderr)
    dead = subprocess.run([sys.executable, "-m", "vulture", *PYTHON_TREES, "--min-confidence", "60",
                           "--ignore-names", ",".join(FRAMEWORK_NAMES), "--ignore-decorators", "@pytest.fixture,@*.command",
                           "--exclude", "generator/controlplane/gomodules"], cwd=paths.ROOT, capture_output=True, text=True)
    if dead.returncode:
        out.append("vulture (dead code):\n" + dead.stdout + dead.stderr)
    return out


def main() -> int:
    problems: list[str] = code_problems()
    print("python: ruff and vulture")
    for chart in scenarios.CHARTS.values():
        problems += [f"helm lint {chart.name}: {p}" for p in helm_lint(chart)]
    print(f"helm lint: {len(scenarios.CHARTS)} charts" + (f", each scenario, with {helm_cli()}" if helm_cli() else
                                                           " (Helm SDK; `python -m generator cluster build` adds the CLI)"))
    problems += schema_problems()
    print("schemas: checked")
    problems += scenario_problems()
    print(f"kubernetes validation: {len(scenarios.all_cases())} scenarios")
    failed, errors = checkov_failures()
    problems += errors
    unexplained = sorted(failed - explained_checks())
    problems += [f"checkov {c} fails on charts/pytorch-operator and its README does not explain why" for c in unexplained]
    print(f"checkov: {len(failed)} failing checks, all explained" if not unexplained and not errors
          else f"checkov: {len(unexplained)} unexplained failing checks")
    for p in problems:
        print(f"FAIL {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
