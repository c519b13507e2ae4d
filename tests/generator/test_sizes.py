"""The project's size rules, read from the code itself: no module of the generator or the trainer
over 400 lines, no function over 80 lines, and none with more than 8 parameters (click commands
aside: their parameters are the command's options)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from generator import paths

TREES = (paths.ROOT / "generator", paths.ROOT / "trainer")
MODULE_LINES, FUNCTION_LINES, PARAMETERS = 400, 80, 8


def modules() -> list[Path]:
    return sorted(p for tree in TREES for p in tree.rglob("*.py"))


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A click command or group: its parameters are its options, as many as it has."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("command", "group", "option", "argument") or name.endswith("_option"):
            return True
    return False


def oversized(path: Path) -> list[str]:
    text = path.read_text()
    where = path.relative_to(paths.ROOT)
    found = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES:
        found.append(f"{where}: {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        if length > FUNCTION_LINES:
            found.append(f"{where}:{node.lineno} {node.name}: {length} lines (at most {FUNCTION_LINES})")
        args = node.args
        count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
        count -= bool(args.args) and args.args[0].arg in ("self", "cls")
        if count > PARAMETERS and not _is_command(node):
            found.append(f"{where}:{node.lineno} {node.name}: {count} parameters (at most {PARAMETERS})")
    return found


def test_every_module_and_function_keeps_to_the_size_rules():
    found = [line for path in modules() for line in oversized(path)]
    assert not found, "split these:\n" + "\n".join(found)


@pytest.mark.parametrize(("source", "said"), [
    ("x = 1\n" * 401, "401 lines (at most 400)"),
    ("def f():\n" + "    x = 1\n" * 80, "f: 81 lines (at most 80)"),
    ("def f(a, b, c, d, e, f, g, h, i):\n    pass\n", "f: 9 parameters (at most 8)"),
    ("class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n", None),  # self is not counted
    ("@click.command()\ndef up(a, b, c, d, e, f, g, h, i):\n    pass\n", None),
])
def test_the_rules_are_read_as_written(tmp_path, monkeypatch, source, said):
    path = tmp_path / "module.py"
    path.write_text(source)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    found = oversized(path)
    assert found == [] if said is None else len(found) == 1 and found[0].endswith(said), found
