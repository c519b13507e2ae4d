"""The waits of `cluster up`'s steps share their caller's one timeout: a later step gets what is
left of it (at least one look), never a fixed minute of its own that a loaded machine outlasts."""
import ast
import inspect
import re
import time

import pytest

from generator.controlplane import processes


def test_a_later_step_waits_for_what_the_timeout_has_left_and_names_what_it_waited_for():
    spent = time.monotonic() - 5  # a deadline already passed: the earlier steps took it all
    assert processes.left(spent) == 1.0
    with pytest.raises(RuntimeError, match=r"^timed out after 1s waiting for the API server to reach the webhook"):
        processes.wait_until(lambda: False, processes.left(spent), "the API server to reach the webhook")
    assert processes.left(time.monotonic() + 3600) > 60  # an hour's timeout: far more than the old fixed minute


def test_cluster_up_gives_the_supervisor_its_timeout_with_time_left_to_say_which_wait_ran_out(tmp_path):
    """`cluster up --timeout 1800` hands the supervisor what it leaves the bring-up (--within):
    every step's wait ends before `cluster up` stops waiting, so a wait that runs out is reported
    as itself, and a step late in a slow bring-up still gets what the user's timeout leaves."""
    from generator.controlplane import lifecycle, supervisor
    from generator.controlplane.layout import Layout
    from generator.controlplane.state import NodeOptions

    argv = lifecycle._supervisor_argv(Layout(tmp_path), NodeOptions(), lifecycle.Releases(operator=False), 1800)
    assert argv[1:3] == ["-m", "generator.controlplane.supervisor"]
    within = 1800 - lifecycle.REPORT_SECONDS
    assert f"--within={within:g}" in argv
    sup = supervisor.from_argv(argv[3:])
    assert within - 10 < sup.left() <= within
    assert sup.operator_values is None


def _modules() -> list:
    """The bring-up's steps, the node's, the admin client's apply and every module of the releases."""
    import importlib
    import pkgutil

    from generator.controlplane import admin, bringup, releases
    from generator.controlplane.realnode import node

    return [bringup, node, admin, *(importlib.import_module(f"{releases.__name__}.{m.name}")
                                    for m in pkgutil.iter_modules(releases.__path__))]


def _number(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _fixed_call(node: ast.Call) -> str:
    name = getattr(node.func, "attr", getattr(node.func, "id", ""))
    if name == "wait_until" and len(node.args) > 1 and _number(node.args[1]):
        return f"waits {node.args[1].value} s"
    if name in ("install", "wait_ready", "apply", "create_queues") and any(
            _number(a) for a in [*node.args, *(k.value for k in node.keywords)]):
        return f"gives {name} a fixed figure"
    return ""


def _fixed(where: str, source: str) -> list[str]:
    """Each wait in `source` that takes its time from a number of its own: a literal timeout to
    wait_until, a literal given to a release's install or wait or to apply, a deadline or a default
    timeout made of a number, or a helm `--timeout 5m`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        said = ""
        if isinstance(node, ast.Call):
            said = _fixed_call(node)
        elif isinstance(node, ast.BinOp) and "monotonic" in ast.unparse(node.left) and _number(node.right):
            said = f"makes a deadline of {node.right.value} s"
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            params = node.args
            defaulted = params.args[len(params.args) - len(params.defaults):]
            said = ", ".join(f"defaults {a.arg} to {d.value}" for a, d in zip(defaulted, params.defaults, strict=True)
                             if a.arg in ("timeout", "end", "within") and _number(d))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\d+[smh]", node.value):
            said = f"gives helm {node.value}"
        if said:
            found.append(f"{where}:{node.lineno} {said}")
    return found


def test_no_bring_up_step_and_no_release_waits_a_fixed_figure_of_its_own():
    """Each wait in the steps takes its time from the supervisor (sup.left(), or its deadline
    sup.end that a release's waits share), none from a number: the releases package included."""
    modules = _modules()
    assert {"generator.controlplane.releases.base", "generator.controlplane.releases.kueue",
            "generator.controlplane.releases.operator", "generator.controlplane.releases.trainer"} <= {
        m.__name__ for m in modules}
    assert [line for m in modules for line in _fixed(m.__name__, inspect.getsource(m))] == []


def test_the_check_finds_each_form_of_a_fixed_wait():
    """The forms the steps' and releases' waits had before they shared `cluster up --timeout`."""
    source = ("def wait_ready(layout, kubelet, timeout: float = 300):\n"
              "    end = time.monotonic() + 60\n"
              "    processes.wait_until(ready, 120, 'the node to be Ready')\n"
              "    base.wait_ready(layout, release, kubelet, 300)\n"
              "    argv = ['helm', 'install', '--timeout', '5m']\n"
              "    processes.wait_until(ready, processes.left(end), 'the node to be Ready')\n")
    assert sorted(_fixed("m", source)) == ["m:1 defaults timeout to 300", "m:2 makes a deadline of 60 s",
                                           "m:3 waits 120 s", "m:4 gives wait_ready a fixed figure", "m:5 gives helm 5m"]
