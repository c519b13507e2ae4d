"""The launch contract: the operator's env (one process per pod), torchrun (PET_* variables,
elastic rendezvous), or a plain process with none of it (world size 1).

Under the operator's env every start of the group is a generation: rank 0 hosts the store and
names a fresh generation, and each rank joins it once. A pod restarted while the old Master still
lives reaches that Master's generation after its group started, and leaves at once instead of
waiting in a group that will never take it; a rank whose peer died leaves as soon as a collective
fails. Both exit RETRY_EXIT, which every restart policy but Never retries, so the pods meet again
in the Master's next generation."""
from __future__ import annotations

import datetime
import os
import sys
import time
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

RETRY_EXIT = 200  # in 128-255: restartPolicy ExitCode retries it, as it retries a kill
GENERATION_KEY = "pytorchjob-kit/generation"
FINISHED_KEY, LEFT_KEY = "pytorchjob-kit/finished", "pytorchjob-kit/left"
LEAVE_TIMEOUT_S = 60.0  # how long rank 0 keeps its store up for ranks still leaving
# The store init() made the group with. torch has no public getter for the default group's store
# (only distributed_c10d._get_default_store), so the trainer keeps the one it built.
_store: dist.Store | None = None
# How gloo and the store word a peer that went away (torch raises plain RuntimeErrors for some).
PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "gloo/transport",
             "Connection refused", "NCCL communicator was aborted", "Socket Timeout", "failed to recv")


class LaunchError(RuntimeError):
    """A launch that cannot work; the message says how to fix it."""


class PeerLost(RuntimeError):
    """The group cannot go on as it is (a peer died, or this rank reached a generation that had
    already started); a restart joins the next one."""


def peer_lost(exc: BaseException) -> bool:
    """Whether a failure is the group's (a dead or departed peer), not this rank's own."""
    if isinstance(exc, PeerLost):
        return True
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in PEER_GONE)


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    master: str  # MASTER_ADDR:MASTER_PORT, for messages

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_backend(requested: str) -> str:
    cuda = torch.cuda.is_available()
    if requested == "auto":
        return "nccl" if cuda else "gloo"
    if requested == "nccl" and not cuda:
        raise LaunchError("--backend nccl needs a CUDA GPU, and none is visible to this process; "
                          "request GPUs for the pod (resources.gpus) or use --backend gloo")
    return requested


def _int_env(env: dict, name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise LaunchError(f"{name}={raw!r} is not an integer; the operator or torchrun sets it, so check the pod's env") from None


def read_launch(backend: str, env: dict | None = None) -> Launch:
    """Rank, world size and device from the environment, checked for contradictions."""
    env = dict(os.environ if env is None else env)
    world = _int_env(env, "WORLD_SIZE", 1)
    rank = _int_env(env, "RANK", 0)
    # The operator never sets LOCAL_RANK; torchrun always does.
    local_rank = _int_env(env, "LOCAL_RANK", 0)
    under_torchrun = "TORCHELASTIC_RUN_ID" in env or "LOCAL_WORLD_SIZE" in env
    nproc = env.get("PET_NPROC_PER_NODE", "")
    if not under_torchrun and nproc.isdigit() and int(nproc) > 1:
        raise LaunchError(f"nprocPerNode is {nproc} but this container was not started through torchrun, so only one "
                          "process runs here; start it with `torchrun --module trainer` (the chart does this when "
                          "launcher is auto) or set nprocPerNode to 1")
    if world < 1 or not 0 <= rank < world:
        raise LaunchError(f"RANK={rank} does not fit WORLD_SIZE={world}; the job's env is inconsistent")
    resolved = resolve_backend(backend)
    if resolved == "nccl":
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise LaunchError(f"LOCAL_RANK={local_rank} but only {count} GPU(s) are visible; "
                              f"set nprocPerNode to at most {count} or request more GPUs")
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    master = f"{env.get('MASTER_ADDR', '127.0.0.1')}:{env.get('MASTER_PORT', '?')}"
    return Launch(rank, world, local_rank, resolved, device, master)


def init(launch: Launch, timeout_s: float) -> None:
    """Join the process group; an unreachable master fails naming MASTER_ADDR:MASTER_PORT."""
    if launch.device.type == "cuda":
        torch.cuda.set_device(launch.device)
    if not launch.distributed:
        return
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise LaunchError(f"WORLD_SIZE={launch.world_size} but {name} is not set; the operator sets it for "
                              "PyTorchJob pods, torchrun sets it for its processes")
    timeout = datetime.timedelta(seconds=timeout_s)
    device_id = launch.device if launch.device.type == "cuda" else None
    try:
        if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's agent has held the rendezvous
            store = _torchrun_attempt(launch, timeout)
        else:
            store = _join_generation(launch, timeout)
    except (RuntimeError, ValueError, OSError) as exc:
        if isinstance(exc, PeerLost):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LaunchError(f"could not reach the master at {launch.master} within {timeout_s:g}s as rank {launch.rank} "
                          f"of {launch.world_size} ({first}); check that the Master pod is running and its "
                          "pytorchjob-port is reachable, or raise --rdzv-timeout") from exc
    dist.init_process_group(launch.backend, store=store, rank=launch.rank, world_size=launch.world_size,
                            timeout=timeout, device_id=device_id)
    global _store
    _store = store


def _torchrun_attempt(launch: Launch, timeout: datetime.timedelta):
    """The store torchrun's agent serves, under a prefix of this start of the workers' own. The
    agent serves one store to every start, and torch adds no prefix per start, so a restarted group
    would read the last one's keys: gloo's addresses of ranks that are gone (its connect then fails,
    "Connection refused"), and this trainer's end of the run. A failure restart raises
    TORCHELASTIC_RESTART_COUNT, and a change of membership changes the world size."""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), launch.world_size,
                          is_master=launch.is_main and not agent, timeout=timeout, wait_for_workers=False)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"pytorchjob-kit/attempt-{attempt}-world-{launch.world_size}", store)


def _join_generation(launch: Launch, timeout: datetime.timedelta):
    """The Master's store, under the prefix of its current generation, joined once by each rank."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), launch.world_size,
                          is_master=launch.is_main, timeout=timeout, wait_for_workers=False)
    if launch.is_main:
        generation = uuid.uuid4().hex[:12]
        store.set(GENERATION_KEY, generation)
    else:
        generation = store.get(GENERATION_KEY).decode()
    if store.add(f"{generation}/rank-{launch.rank}", 1) > 1:
        raise PeerLost(f"rank {launch.rank} reached the Master's generation {generation} after it had started, so that "
                       "Master is from before this pod's restart and its group is going away")
    return dist.PrefixStore(generation, store)


def finish(launch: Launch) -> None:
    """The group's last step, over the store rather than a collective. The other ranks wait until
    rank 0 has written its outputs; every rank then closes its process group; rank 0, whose store
    (or whose node's torchrun store) the others talk to, leaves last. So a finished pod means
    finished outputs, and no rank takes a peer's closed connection for a failure once the run's
    outcome is decided."""
    if not (dist.is_available() and dist.is_initialized()) or _store is None:
        return
    store = _store
    if launch.is_main:
        store.set(FINISHED_KEY, "1")
    else:
        store.wait([FINISHED_KEY])  # a Master that died meanwhile raises here: a lost peer
    shutdown()
    if not launch.is_main:
        store.add(LEFT_KEY, 1)
        return
    deadline = time.monotonic() + LEAVE_TIMEOUT_S
    while (left := store.add(LEFT_KEY, 0)) < launch.world_size - 1:
        if time.monotonic() > deadline:
            print(f"trainer (rank 0): {launch.world_size - 1 - left} rank(s) did not confirm leaving within "
                  f"{LEAVE_TIMEOUT_S:g}s; the outputs are written, so this rank exits anyway", file=sys.stderr, flush=True)
            return
        time.sleep(0.05)


def shutdown() -> None:
    """Leave the group, whatever state it is in: a peer already gone (after a failure, or a
    launcher that ended first) is told on stderr, never made this rank's failure."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (RuntimeError, OSError, ValueError) as exc:
            print(f"trainer: leaving the process group: {exc}", file=sys.stderr, flush=True)
