"""`generator run` decides once how the pods run (generator/cli/run.py chooses the backend, as the
Kubeflow SDK's TrainerClient takes one): no other module names a backend, and none outside the
backends reads what only one backend has (its network, a replica's container spec), so the kinds'
plans and the runner ask the backend instead of testing which one they hold."""
from __future__ import annotations

import ast
from pathlib import Path

from generator import paths

GENERATOR = paths.ROOT / "generator"
CHOOSER = GENERATOR / "cli" / "run.py"
# Attributes only one backend's objects carry: its network, and a replica's container spec (a kind's
# own `container` is its training container's name, which kinds/ reads).
ONE_BACKENDS = {"local": ("network", "container"), "kinds": ("network",)}


def _inside(path: Path, folder: Path) -> bool:
    return path.is_relative_to(folder)


def naming_a_backend(root: Path = GENERATOR) -> list[str]:
    """file:line of each import of one backend's package outside the backends and the chooser."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if _inside(path, root / "local" / "backends") or path == root / "cli" / "run.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(m.startswith(("generator.local.backends.processes", "generator.local.backends.containers"))
                   for m in modules):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def reading_one_backends_fields(root: Path = GENERATOR) -> list[str]:
    """file:line where local/ or kinds/ (outside the backends) reads what only one backend has."""
    found = []
    for package, attrs in ONE_BACKENDS.items():
        for path in sorted((root / package).rglob("*.py")):
            if _inside(path, root / "local" / "backends"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in attrs:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: .{node.attr}")
                elif isinstance(node, ast.arg) and node.arg == "network":  # a flag passed down instead of a backend
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: parameter network")
    return found


def test_only_the_run_command_chooses_a_backend():
    assert naming_a_backend() == [], "choose the backend in generator/cli/run.py and pass it on"
    assert "Containers" in CHOOSER.read_text() and "Processes" in CHOOSER.read_text()


def test_nothing_outside_the_backends_tests_which_backend_it_holds():
    assert reading_one_backends_fields() == [], "ask plan.backend (local/backends/base.py) instead"


def test_the_checks_catch_a_backend_named_and_a_network_tested(tmp_path):
    root = tmp_path / "generator"
    for folder in ("local/backends/containers", "kinds/toy", "cli"):
        (root / folder).mkdir(parents=True)
    (root / "kinds" / "toy" / "plan.py").write_text(
        "def plan(backend, network=None):\n    from generator.local.backends.containers.backend import Containers\n"
        "    if backend.network:\n        return Containers\n")
    (root / "local" / "backends" / "containers" / "backend.py").write_text("x = plan.network\n")
    assert naming_a_backend(root) == ["generator/kinds/toy/plan.py:2"]
    assert sorted(reading_one_backends_fields(root)) == ["generator/kinds/toy/plan.py:1: parameter network",
                                                         "generator/kinds/toy/plan.py:3: .network"]
