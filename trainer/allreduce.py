"""Gradient all-reduce through shared memory, for a group whose ranks all share one host.

gloo sums gradients over TCP even when both ends are on one machine: on a 2-core CPU node the
kernel's loopback copies of the gradients cost each rank about 2 ms of CPU per step (measured in
trainer/BENCHMARK.md), on cores that have no time to spare. When every rank can open the same
private folder under /dev/shm (torchrun's processes in one pod, or pods of one node that share
it), each rank instead copies its bucket into a shared file, waits for its peers, and sums every
rank's copy in rank order, so every rank gets the same bits. Ranks wake each other through
named pipes: one byte per peer per bucket, and a pipe whose writer has died reads as the end of
file, so a lost peer is noticed at once instead of at a timeout.

Nothing of it stays on disk: rank 0 removes the folder as soon as every rank has opened its
files. Ranks on different hosts, a /dev/shm too small for the buckets, or a backend other than
gloo keep the backend's own all-reduce."""
import json
import os
import secrets
import select
import shutil
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .distributed import PeerLost

SHM_DIR = Path("/dev/shm")
PREFIX = "pytorchjob-kit/shm-allreduce"
# One slot holds one bucket; the file holds 2 x world size slots, and a container's /dev/shm is
# often 64 MiB. A model larger than a slot has buckets of this size, and the odd larger one (DDP's
# first step puts every gradient in one bucket) goes through the backend.
MAX_SLOT_BYTES = 8 << 20


class SharedMemoryAllReduce:
    """Sums tensors across the group through one shared file; every rank calls in the same order."""

    def __init__(self, rank: int, world_size: int, data: torch.Tensor, readers: dict[int, int],
                 writers: dict[int, int], timeout_s: float):
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.slot_bytes = data.numel() // (2 * world_size)
        # [parity][rank][bytes]: two alternating sets, so a rank that has gone on to the next
        # call never overwrites a copy a slower peer is still summing.
        self.slots = data.view(2, world_size, self.slot_bytes)
        self.readers, self.writers = readers, writers
        self.calls = 0

    @classmethod
    def connect(cls, store, rank: int, world_size: int, slot_bytes: int, timeout_s: float,
                shm_dir: Path = SHM_DIR) -> "SharedMemoryAllReduce | None":
        """Set up over the group's store; None (on every rank alike) when some rank cannot share
        rank 0's memory. Every rank of the group must call it."""
        if world_size < 2 or slot_bytes <= 0:
            return None
        slot_bytes = -(-slot_bytes // 64) * 64  # every slot starts on a cache line, and fits any dtype's alignment
        if rank == 0:
            folder = _offer(shm_dir, world_size, slot_bytes)
            offer = {"folder": str(folder), "token": (folder / "token").read_text()} if folder else {}
            store.set(f"{PREFIX}/offer", json.dumps(offer))
        offer = json.loads(store.get(f"{PREFIX}/offer"))
        folder = Path(offer["folder"]) if offer else None
        sees = folder is not None and folder.parent == shm_dir and _reads_token(folder, offer["token"])
        store.set(f"{PREFIX}/sees/{rank}", "1" if sees else "0")
        everyone = all(store.get(f"{PREFIX}/sees/{r}") == b"1" for r in range(world_size))
        if not everyone:
            if rank == 0 and folder:
                shutil.rmtree(folder, ignore_errors=True)
            return None
        readers, writers = {}, {}
        try:
            # Read ends first (non-blocking opens succeed without a writer), then, once every
            # rank has its read ends, the write ends; a pipe then reads as ended only when its
            # writer's process has.
            for peer in range(world_size):
                if peer != rank:
                    readers[peer] = os.open(folder / f"pipe-{peer}-{rank}", os.O_RDONLY | os.O_NONBLOCK)
            _barrier(store, "readers", rank, world_size)
            for peer in range(world_size):
                if peer != rank:
                    writers[peer] = os.open(folder / f"pipe-{rank}-{peer}", os.O_WRONLY | os.O_NONBLOCK)
            size = 2 * world_size * slot_bytes
            data = torch.from_file(str(folder / "data"), shared=True, size=size, dtype=torch.uint8)
            _barrier(store, "opened", rank, world_size)
        finally:
            if rank == 0:  # every rank has its files open, or the set-up failed: nothing stays behind
                shutil.rmtree(folder, ignore_errors=True)
        return cls(rank, world_size, data, readers, writers, timeout_s)

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the group, in place; every rank ends with the same bits."""
        flat = tensor.view(-1)
        nbytes = flat.numel() * flat.element_size()
        if nbytes > self.slot_bytes:
            raise ValueError(f"a {nbytes}-byte all-reduce does not fit the {self.slot_bytes}-byte shared slots")
        parity = self.calls % 2
        self.calls += 1
        slots = self.slots[parity, :, :nbytes].view(self.world_size, -1).view(flat.dtype)
        slots[self.rank].copy_(flat)
        self._wait_for_peers()
        torch.sum(slots, dim=0, out=flat)
        return tensor

    def _wait_for_peers(self) -> None:
        for peer, fd in self.writers.items():
            try:
                os.write(fd, b"\0")
            except BrokenPipeError:
                raise PeerLost(f"rank {peer} left the shared-memory all-reduce (its process ended)") from None
        waiting = dict(self.readers)
        deadline = time.monotonic() + self.timeout_s
        while waiting:
            left = deadline - time.monotonic()
            ready, _, _ = select.select(list(waiting.values()), [], [], max(left, 0))
            if not ready:
                raise PeerLost(f"rank(s) {sorted(waiting)} did not reach the shared-memory all-reduce within "
                               f"{self.timeout_s:g}s")
            for peer, fd in list(waiting.items()):
                if fd in ready:
                    if not os.read(fd, 1):
                        raise PeerLost(f"rank {peer} left the shared-memory all-reduce (its process ended)")
                    del waiting[peer]

    def close(self) -> None:
        for fd in (*self.readers.values(), *self.writers.values()):
            os.close(fd)
        self.readers, self.writers = {}, {}


def ddp_hook(state: SharedMemoryAllReduce, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook (`register_comm_hook(state, ddp_hook)`): the mean of the bucket's
    gradients, as DDP's own hook gives. A bucket larger than the slots goes through the backend."""
    buffer = bucket.buffer().div_(state.world_size)
    if buffer.numel() * buffer.element_size() > state.slot_bytes:
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])
    state.all_reduce_(buffer)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return fut


def slot_bytes_for(model: torch.nn.Module) -> int:
    """Room for the model's whole gradient in one bucket, up to MAX_SLOT_BYTES."""
    return min(sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad), MAX_SLOT_BYTES)


def bucket_cap_mb(slot_bytes: int) -> float:
    """DDP's bucket cap for these slots: one bucket for a model that fits one, else slot-sized ones,
    since every rank waits for its peers at each bucket."""
    return slot_bytes / (1 << 20)


def _offer(shm_dir: Path, world_size: int, slot_bytes: int) -> Path | None:
    """Rank 0's private folder with the data file and the pipes, or None where it cannot be had."""
    if not shm_dir.is_dir():
        return None
    try:
        folder = Path(tempfile.mkdtemp(prefix="trainer-allreduce-", dir=shm_dir))  # mode 0700
    except OSError:
        return None
    try:
        fd = os.open(folder / "data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # Reserve the memory now: a tmpfs that runs out while mapped kills with SIGBUS.
            os.posix_fallocate(fd, 0, 2 * world_size * slot_bytes)
        finally:
            os.close(fd)
        for a in range(world_size):
            for b in range(world_size):
                if a != b:
                    os.mkfifo(folder / f"pipe-{a}-{b}", 0o600)
        (folder / "token").write_text(secrets.token_hex(16))
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return folder


def _reads_token(folder: Path, token: str) -> bool:
    """Whether this rank sees rank 0's folder itself, not a namesake in another host's /dev/shm."""
    try:
        return (folder / "token").read_text() == token
    except OSError:
        return False


def _barrier(store, name: str, rank: int, world_size: int) -> None:
    store.set(f"{PREFIX}/{name}/{rank}", "1")
    store.wait([f"{PREFIX}/{name}/{r}" for r in range(world_size)])
