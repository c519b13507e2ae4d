"""How a v1 container's command starts under Trainer v2, which sets only the PET_* variables that
torchrun reads: a command already through torchrun stays; a Python script or module is handed to
torchrun; anything else runs under `torchrun --no-python`, unchanged."""
from __future__ import annotations

import os
import re

TORCHRUN = "torchrun"
TORCHRUN_MODULE = "torch.distributed.run"  # what the torchrun script runs: `python -m` of it is torchrun
OLD_LAUNCHER = "torch.distributed.launch"  # deprecated; it passes --local_rank, which torchrun does not
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")

# How the v1 command started, which decides what the conversion has to say.
THROUGH_TORCHRUN, TORCHRUN_AS_MODULE, HANDED_TO_TORCHRUN = "torchrun", "module", "handed"


class OldLauncher(ValueError):
    """The command starts torch.distributed.launch, which torchrun cannot take over as it is."""


def through_torchrun(command: list[str]) -> tuple[list[str], str]:
    """(the command every v2 node starts, how the v1 command started)."""
    head = os.path.basename(command[0]) if command else ""
    if head == TORCHRUN:  # by name: Trainer's runtimes, and the check of a TrainJob, expect it on PATH
        return [TORCHRUN, *command[1:]], THROUGH_TORCHRUN
    rest = list(command[1:])
    if _PYTHON.fullmatch(head):
        if rest[:2] == ["-m", TORCHRUN_MODULE]:
            return [TORCHRUN, *rest[2:]], TORCHRUN_AS_MODULE
        if rest[:2] == ["-m", OLD_LAUNCHER]:
            raise OldLauncher(OLD_LAUNCHER)
        if rest[:1] == ["-m"] and len(rest) > 1:
            return [TORCHRUN, "--module", rest[1], *rest[2:]], HANDED_TO_TORCHRUN
        if rest and not rest[0].startswith("-"):
            return [TORCHRUN, *rest], HANDED_TO_TORCHRUN
    return [TORCHRUN, "--no-python", *command], HANDED_TO_TORCHRUN
