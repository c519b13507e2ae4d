"""A chart's parameter table, generated from the "# --" comments in its values.yaml.

`python -m generator.chartdoc CHART...` rewrites the table between the markers in each
chart's README.md; `make docs` runs it and a test fails when a README drifts."""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

START, END = "<!-- parameters:start -->", "<!-- parameters:end -->"
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.\-]+):(.*)$")


@dataclass
class Parameter:
    path: str
    default: object
    description: str


def parameters(values_file: Path) -> tuple[list[Parameter], list[str]]:
    """Documented keys in file order, and the dotted paths of leaves without a "# --" comment."""
    text = values_file.read_text()
    data = yaml.safe_load(text) or {}
    documented: list[Parameter] = []
    undocumented: list[str] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and comment is not None:
            comment.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match or stripped.startswith("-"):
            if not stripped:
                comment = None
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        value = _lookup(data, path)
        if any(path.startswith(d.path + ".") for d in documented):
            comment = None  # part of a documented map's default
            continue
        if comment is not None:
            documented.append(Parameter(path, value, " ".join(comment)))
        elif not isinstance(value, dict) or not value:
            undocumented.append(path)
        comment = None
    return documented, undocumented


def _lookup(data: dict, path: str) -> object:
    for part in path.split("."):
        data = data[part]
    return data


def table(values_file: Path) -> str:
    rows = ["| Key | Default | Description |", "| --- | --- | --- |"]
    for p in parameters(values_file)[0]:
        default = json.dumps(p.default, separators=(",", ":"))
        description = p.description.replace("|", "\\|")
        rows.append(f"| `{p.path}` | `{default}` | {description} |")
    return "\n".join(rows) + "\n"


def updated_readme(chart: Path) -> str:
    """The chart's README with a freshly generated table between the markers."""
    readme = (chart / "README.md").read_text()
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table(chart / 'values.yaml')}{END}{tail}"


def main(argv: list[str]) -> int:
    for arg in argv:
        chart = Path(arg)
        _, undocumented = parameters(chart / "values.yaml")
        if undocumented:
            print(f"{chart}/values.yaml: undocumented keys: {', '.join(undocumented)}; add a '# --' comment above each",
                  file=sys.stderr)
            return 1
        readme = chart / "README.md"
        text = updated_readme(chart)
        if readme.read_text() == text:
            print(f"{readme}: unchanged")
            continue
        readme.write_text(text)
        print(f"updated {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
