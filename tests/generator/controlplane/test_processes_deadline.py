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
