"""The waits of `cluster up`'s steps share their caller's one timeout: a later step gets what is
left of it (at least one look), never a fixed minute of its own that a loaded machine outlasts."""
import time

import pytest

from generator.controlplane import processes


def test_a_later_step_waits_for_what_the_timeout_has_left_and_names_what_it_waited_for():
    spent = time.monotonic() - 5  # a deadline already passed: the earlier steps took it all
    assert processes.left(spent) == 1.0
    with pytest.raises(RuntimeError, match=r"^timed out after 1s waiting for the API server to reach the webhook"):
        processes.wait_until(lambda: False, processes.left(spent), "the API server to reach the webhook")
    assert processes.left(time.monotonic() + 3600) > 60  # an hour's timeout: far more than the old fixed minute


def test_cluster_up_gives_the_supervisor_its_timeout_and_every_step_waits_within_it(tmp_path):
    from generator.controlplane import lifecycle
    from generator.controlplane.layout import Layout
    from generator.controlplane.state import NodeOptions
    from generator.controlplane.supervisor import Supervisor

    argv = lifecycle._supervisor_argv(Layout(tmp_path), NodeOptions(), lifecycle.Releases(operator=False), 1800)
    assert "--within=1800" in argv
    sup = Supervisor(Layout(tmp_path), None, NodeOptions(), within=1800)
    assert 1790 < sup.left() <= 1800  # a step late in a slow bring-up still gets what the user's timeout leaves


def test_no_bring_up_step_waits_a_fixed_figure_of_its_own():
    """Each wait in the steps takes its time from the supervisor (sup.left()), none from a number."""
    import ast
    import inspect

    from generator.controlplane import bringup
    from generator.controlplane.realnode import node

    fixed = []
    for module in (bringup, node):
        for call in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "wait_until":
                if isinstance(call.args[1], ast.Constant):
                    fixed.append(f"{module.__name__}:{call.lineno} waits {call.args[1].value} s")
    assert fixed == []
