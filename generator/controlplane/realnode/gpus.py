"""`cluster up --gpus N`: the node advertises N `nvidia.com/gpu`, as Kubernetes documents for an
extended resource no device plugin reports: a PATCH of the Node's status capacity (the kubelet
copies capacity into allocatable). The kubelet zeroes extended resources when it registers a
Node anew (kubelet restarted, its device-plugin checkpoint gone), so a keeper thread puts them
back whenever the Node lacks them, until the cluster stops. Pods that ask for a GPU are admitted
and scheduled; they get no device, so they train on the CPU (the trainer with --backend gloo)."""
from __future__ import annotations

import threading

RESOURCE = "nvidia.com/gpu"
POLL_SECONDS = 2.0


def patch(count: int) -> list[dict]:
    """The JSON patch of the Node's status: `/` in the resource's name written as `~1` (RFC 6901)."""
    key = RESOURCE.replace("~", "~0").replace("/", "~1")
    return [{"op": "add", "path": f"/status/{field}/{key}", "value": str(count)} for field in ("capacity", "allocatable")]


def advertised(node) -> int | None:
    """The GPUs the Node's capacity lists; None when it lists none."""
    value = (node.status.capacity or {}).get(RESOURCE)
    return int(value) if value is not None else None


def advertise(core, name: str, count: int) -> bool:
    """Patch the Node's status when it lacks `count` GPUs; whether it patched."""
    if advertised(core.read_node_status(name)) == count:
        return False
    core.patch_node_status(name, patch(count))
    return True


class Keeper(threading.Thread):
    """Puts the GPUs back whenever the Node lacks them (a kubelet that registered it again)."""

    def __init__(self, core, name: str, count: int, stopping: threading.Event):
        super().__init__(name="gpus", daemon=True)
        self.core, self.name, self.count, self.stopping = core, name, count, stopping

    def run(self) -> None:
        while not self.stopping.wait(POLL_SECONDS):
            try:
                if advertise(self.core, self.name, self.count):
                    print(f"node {self.name}: {RESOURCE}={self.count} advertised again", flush=True)
            except Exception as exc:  # the API server restarting: the next round tries again
                print(f"gpus: {exc}", flush=True)
