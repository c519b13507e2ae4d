"""The packages' layering, read from every module's imports (lazy ones inside functions too): no
package depends on itself through another, and `generator run` (local/) and the control plane
(controlplane/) share the container runtime (container/) instead of reaching into each other."""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

from generator import paths

PACKAGE_ROOT = paths.ROOT / "generator"
PACKAGES = ("local", "controlplane", "container", "job", "cluster", "diagnose", "cli", "kinds", "convert", "images")
APART = {("local", "controlplane"), ("controlplane", "local")}  # the container package sits between them


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "generator" or len(parts) < 2 or parts[1] not in PACKAGES:
        return None
    return parts[1]


def imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) for each absolute import of the generator in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from generator import cli` names a package as much as `import generator.cli` does.
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def edges(root: Path = PACKAGE_ROOT) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where, as `file:line`."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        here = package_of(".".join(("generator", *path.relative_to(root).with_suffix("").parts)))
        for module, line in imports(path):
            there = package_of(module)
            if here and there and here != there:
                out.setdefault((here, there), []).append(f"{path.relative_to(root.parent)}:{line}")
    return out


def cycles(graph: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Each cycle between packages once, as the packages in order (the first repeated at the end)."""
    following: dict[str, set[str]] = {}
    for a, b in graph:
        following.setdefault(a, set()).add(b)
    found: list[list[str]] = []
    seen: set[frozenset] = set()

    def walk(path: list[str]) -> None:
        for nxt in sorted(following.get(path[-1], ())):
            if nxt == path[0]:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle from its smallest package only
                walk([*path, nxt])

    for start in sorted(following):
        walk([start])
    return found


def describe(graph: dict[tuple[str, str], list[str]], cycle: list[str]) -> str:
    return " -> ".join(cycle) + " (" + "; ".join(
        f"{a}->{b} at {', '.join(graph[(a, b)][:3])}" for a, b in itertools.pairwise(cycle)) + ")"


def test_no_package_imports_itself_through_another():
    graph = edges()
    assert graph, "no imports between packages were read: the walk is broken"
    found = [describe(graph, c) for c in cycles(graph)]
    assert not found, "import cycles between packages:\n" + "\n".join(found)


def test_run_and_the_control_plane_meet_only_in_the_container_runtime():
    graph = edges()
    crossing = {pair: where for pair, where in graph.items() if pair in APART}
    assert not crossing, f"local/ and controlplane/ import each other: {crossing}; move what both need to generator/container/"
    assert ("local", "container") in graph and ("controlplane", "container") in graph


SHARED_BY_KINDS = ("job", "container", "local")  # what every kind of job uses, each kind's package on top


def test_what_the_kinds_share_takes_the_kind_and_imports_none():
    """generator/kinds/<kind>/ builds on job/, container/ and local/ (its admission on Kubernetes'
    rules, its plan on pods as processes, its contract on the runner's policy); they take a kind
    as an argument and never import one, so a new kind is a package of its own and nothing else."""
    graph = edges()
    reaching = {pair: where for pair, where in graph.items() if pair[0] in SHARED_BY_KINDS and pair[1] == "kinds"}
    assert not reaching, f"a package every kind shares imports generator/kinds: {reaching}"
    assert ("kinds", "job") in graph and ("kinds", "local") in graph


def test_images_build_without_the_control_plane_or_the_runners():
    """generator/images/ is what builds images, for `make image` and a user's own; the registry and
    the charts' images (controlplane/) use it, never the other way round."""
    graph = edges()
    reaching = {pair: where for pair, where in graph.items() if pair[0] == "images"}
    assert not reaching, f"generator/images/ imports other packages: {reaching}"
    assert ("controlplane", "images") in graph


def test_the_checks_catch_a_cycle_and_a_crossing(tmp_path):
    """The reader on a made-up tree: lazy imports count, and a cycle is named with where it is."""
    root = tmp_path / "generator"
    for package in ("local", "controlplane", "container"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "local" / "plan.py").write_text("from generator.container import ports\n")
    (root / "container" / "ports.py").write_text("def f():\n    from generator.local import plan\n")
    (root / "controlplane" / "node.py").write_text("import generator.local.plan\n")
    graph = edges(root)
    assert cycles(graph) == [["container", "local", "container"]]
    assert describe(graph, cycles(graph)[0]).startswith("container -> local -> container (container->local at generator/")
    assert ("controlplane", "local") in graph
