"""SIGTERM in this process: the flag is set where the signal lands, and a run alone stops at the
next step it asks (the ranks' agreement is shown across processes in test_runs.py)."""
import os
import signal

import pytest
import torch

from trainer.distributed import Launch
from trainer.stopping import Stop, StopAgreement


@pytest.fixture(autouse=True)
def keep_sigterm():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


def test_a_sigterm_is_noted_and_a_run_alone_stops_at_its_next_step():
    stop = Stop()
    agreement = StopAgreement(stop, Launch(0, 1, 0, "gloo", torch.device("cpu"), "127.0.0.1:0"))
    assert not agreement.now()
    os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler before the next line
    assert stop.requested and agreement.now()
