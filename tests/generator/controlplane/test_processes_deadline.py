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


def test_the_releases_waits_end_within_cluster_ups_timeout_with_time_left_to_say_which_ran_out(tmp_path):
    """`cluster up --timeout 600` hands the supervisor its deadline: the waits all end before
    `cluster up` stops waiting, so a wait that runs out is reported as itself."""
    from generator.controlplane import lifecycle, supervisor
    from generator.controlplane.layout import Layout
    from generator.controlplane.state import NodeOptions

    argv = lifecycle._supervisor_argv(Layout(tmp_path), NodeOptions(), lifecycle.Releases(operator=False), 600)
    assert argv[1:3] == ["-m", "generator.controlplane.supervisor"]
    started = time.monotonic()
    sup = supervisor.from_argv(argv[3:])
    assert 600 - lifecycle.REPORT_SECONDS - 2 < sup.deadline - started < 600 - lifecycle.REPORT_SECONDS + 0.01
    assert sup.operator_values is None
