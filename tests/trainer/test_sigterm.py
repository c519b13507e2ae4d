"""SIGTERM before the training loop: `python -m trainer` handles it from its first moment, which is
what PID 1 of a container needs to hear it at all, and exits 143 at once with nothing written,
both while torch loads and while rank 0 waits inside C++ for a peer that never comes."""
import signal

import pytest

from tests.support import procfs, trainer_procs
from tests.support.waiting import wait_for


@pytest.mark.parametrize("when", ["torch loads", "rank 0 waits for rank 1"])
def test_sigterm_before_training_exits_143_at_once_with_nothing_written(tmp_path, when):
    port = trainer_procs.free_port()
    out = tmp_path / "out"
    # A rendezvous timeout of 10 minutes: only the handler can end the wait within the test's.
    proc = trainer_procs.trainer([*trainer_procs.ARGS, "--rdzv-timeout", "600", "--output-dir", str(out)],
                                 trainer_procs.operator_env(0, 2, port))
    try:
        wait_for(lambda: proc.poll() is not None or procfs.handles(proc.pid, signal.SIGTERM), 30, "the trainer to handle SIGTERM",
                 interval=0.01)
        if when == "rank 0 waits for rank 1":
            wait_for(lambda: proc.poll() is not None or procfs.listening(proc.pid, port), 120, f"rank 0 to listen on {port}")
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, output
    assert output.splitlines()[-1] == "trainer (rank 0): SIGTERM before training began; exiting 143 with nothing to save"
    assert not out.exists()
