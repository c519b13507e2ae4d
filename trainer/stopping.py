"""Stopping on SIGTERM: the flag the signal sets, and every rank's agreement to stop at the same
step whichever pod got the signal."""
from __future__ import annotations

import signal

import torch
import torch.distributed as dist

from .distributed import Launch


class Stop:
    """SIGTERM arrives at any moment; the loop looks at the flag between steps."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


class StopAgreement:
    """Whether every rank stops now, so they all stop at the same step whichever pod got the
    signal. Each step starts an all-reduce of this rank's flag and reads the one started a step
    before: the exchange runs on gloo's threads while the step computes, so asking every step
    costs no wait, and a SIGTERM is acted on within two steps whatever a step takes."""

    def __init__(self, stop: Stop, launch: Launch) -> None:
        self.stop, self.launch = stop, launch
        self.flag = torch.zeros(1)  # on the CPU: reading it never waits for a GPU's queue
        self.pending: dist.Work | None = None
        # nccl reduces CUDA tensors only; a gloo group of the same ranks carries the flag there.
        self.group = dist.new_group(backend="gloo") if launch.distributed and launch.backend != "gloo" else None

    def now(self) -> bool:
        if not self.launch.distributed:
            return self.stop.requested
        if self.pending is not None:
            self.pending.wait()
            self.pending = None
            if self.flag.item():
                return True
        self.flag.fill_(1.0 if self.stop.requested else 0.0)
        self.pending = dist.all_reduce(self.flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        return False

    def settle(self) -> None:
        """Wait for the exchange in flight (at an epoch's end and before leaving): no collective
        is left running under the next one, or on gloo's threads at exit. A signal it carried is
        still this rank's flag, and the next epoch's first exchange carries it again."""
        if self.pending is not None:
            self.pending.wait()
            self.pending = None
