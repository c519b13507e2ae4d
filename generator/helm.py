"""Render a chart with a real Helm engine: the helm CLI when it is on PATH, else
helm-python-sdk (Helm v4's Go SDK in-process). Never an imitation of Go templates."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from generator.errors import Finding, UserError


def engine() -> str:
    """Which engine renders: "helm" (CLI) or "helm-python-sdk". PYTORCHJOB_KIT_HELM=sdk forces the SDK."""
    if os.environ.get("PYTORCHJOB_KIT_HELM") != "sdk" and shutil.which("helm"):
        return "helm"
    return "helm-python-sdk"


def render(chart: Path, values: dict, release: str = "release", namespace: str = "default") -> dict[str, str]:
    """Template path -> rendered text, NOTES.txt and empty documents left out."""
    if engine() == "helm":
        raw = _render_cli(chart, values, release, namespace)
    else:
        raw = _render_sdk(chart, values, release, namespace)
    return {path: text for path, text in sorted(raw.items())
            if not path.endswith("NOTES.txt") and text.strip()}


def render_objects(chart: Path, values: dict, release: str = "release", namespace: str = "default") -> list[dict]:
    """The rendered Kubernetes objects, in template order."""
    return objects(render(chart, values, release, namespace))


def render_stream(chart: Path, values: dict, release: str = "release", namespace: str = "default") -> str:
    """One deterministic multi-document YAML stream, like `helm template`."""
    return stream(render(chart, values, release, namespace))


def stream(rendered: dict[str, str]) -> str:
    """Rendered templates (path -> text) as one multi-document stream with `# Source:` lines."""
    return "".join(f"---\n# Source: {path}\n{text.strip()}\n" for path, text in rendered.items())


def objects(rendered: dict[str, str]) -> list[dict]:
    """The Kubernetes objects of rendered templates, in template order, read as the API server
    reads them (go-yaml v2's rules, as values are): an env value that YAML 1.1 would take for a
    date or `=` for its value tag reaches the pod as the text Helm rendered."""
    from generator.job import values_io

    out = []
    for path, text in rendered.items():
        out += [doc for doc in values_io.documents_of(text, f"helm (rendered {path})") if doc]
    return out


def equivalent(verb: str, chart: Path, release: str, values_file: str, namespace: str) -> str:
    """The helm command that does what the generator just did, as a user would type it here:
    `template` for render, `upgrade --install` for submit (helm adopts what submit applied)."""
    import shlex

    try:
        where = os.path.relpath(chart)
    except ValueError:
        where = str(chart)
    where = where if not where.startswith("..") else str(chart)
    words = ["helm", *verb.split(), release, where, "-f", values_file, "-n", namespace]
    return shlex.join(words)


# What makes helm adopt an object applied without it (helm 3.2 and later): the managed-by label
# the chart already renders, and these two annotations naming the release.
RELEASE_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")


def _render_sdk(chart: Path, values: dict, release: str, namespace: str) -> dict[str, str]:
    import helm_python

    try:
        with helm_python.Chart.load(str(chart)) as loaded:
            return loaded.render(values, name=release, namespace=namespace, is_install=True)
    except helm_python.HelmError as exc:
        raise UserError(_findings_from_helm(str(exc)), source=f"helm ({chart.name})") from exc


def _render_cli(chart: Path, values: dict, release: str, namespace: str) -> dict[str, str]:
    import json
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(values, handle)
    try:
        proc = subprocess.run(
            ["helm", "template", release, str(chart), "--namespace", namespace, "-f", handle.name],
            capture_output=True, text=True, check=False)
    finally:
        os.unlink(handle.name)
    if proc.returncode != 0:
        raise UserError(_findings_from_helm(proc.stderr), source=f"helm ({chart.name})")
    out: dict[str, str] = {}
    current = None
    for line in proc.stdout.splitlines(keepends=True):
        if line.startswith("# Source: "):
            current = line[len("# Source: "):].strip()
            out[current] = ""
        elif current and line.strip() != "---":
            out[current] += line
    return out


def _findings_from_helm(text: str) -> list[Finding]:
    """Helm's schema errors come as "- at '/a/b': message" with indented sub-errors;
    fail() errors end in our own "path: message; fix" text."""
    findings: list[Finding] = []
    groups: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        match = re.match(r"^(\s*)- at '([^']*)': (.*)$", line)
        if not match:
            continue
        indent, where, message = match.groups()
        path = where.strip("/").replace("/", ".")
        if not indent:
            groups.append((path, message, []))
        elif groups:
            groups[-1][2].append(message)
    for path, message, details in groups:
        extra = re.match(r"^additional properties (.*) not allowed$", message)
        if extra:
            for key in re.findall(r"'([^']*)'", extra.group(1)):
                findings.append(Finding(f"{path}.{key}" if path else key, "is not a known key",
                                        hint="check the spelling against the chart's values.yaml"))
        elif message == "'not' failed":
            findings.append(Finding(path, "is set through the chart's own values and cannot be passed through",
                                    hint="use the matching top-level value instead"))
        elif message.endswith("failed") and details:
            findings.append(Finding(path, "; or ".join(details)))
        else:
            findings.append(Finding(path, message))
    if not findings:
        message = text.strip().splitlines()[-1] if text.strip() else "helm failed"
        # fail() messages arrive as "execution error at (<template>:<line>): <ours>"
        message = re.sub(r"^.*?execution error at \([^)]*\): ", "", message)
        path, sep, rest = message.partition(": ")
        findings.append(Finding(path, rest) if sep and " " not in path else Finding("", message))
    return findings
