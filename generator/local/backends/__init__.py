"""How `generator run` runs a job's pods: each backend a package (processes/: host processes;
containers/: a container of its image each, on a network of the job's own), one interface
(base.py), chosen once by the command, as the Kubeflow SDK's TrainerClient takes its backend."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.local.backends.base import Backend


def default() -> Backend:
    """What a plan made without a backend runs as: processes of this machine, with no --image."""
    from generator.local.backends.processes.backend import Processes

    return Processes()
