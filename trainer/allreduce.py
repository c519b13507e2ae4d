"""Gradient all-reduce through shared memory (`--allreduce shm`), for ranks that share one host.

An option, not the default: it helps only where several ranks share one `/dev/shm` (torchrun's
processes in one pod, or `generator run`'s replicas on one machine). Pods of a cluster each have
their own, and there gloo's all-reduce is used as in any DDP script. On a 2-core CPU node gloo's
loopback TCP costs each rank about 2 ms of CPU per step (trainer/BENCHMARK.md); here each rank
instead copies its bucket into a shared file, waits for its peers, and sums every rank's copy in
rank order on the training thread, so every rank gets the same bits (gloo's own bits at 2 ranks;
from 3, gloo's ring adds in another order and the last bits may differ). Ranks wake each other
through named pipes: one byte per peer per bucket, and a pipe whose writer has died reads as the
end of file, so a lost peer is noticed at once instead of at a timeout.

Nothing of it stays in /dev/shm: every rank that knows the folder removes it as it leaves the
set-up, whatever way it leaves (every rank has its files open by then, or gave up), and a
folder left by a rank 0 killed before it could tell anyone (its lock gone with it) is removed by
the next set-up on that host. Ranks on different hosts, a /dev/shm too small for the buckets, or
a backend other than gloo keep the backend's own all-reduce."""
import fcntl
import os
import secrets
import select
import shutil
import stat
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .distributed import PeerLost

SHM_DIR = Path("/dev/shm")
# One slot holds one bucket, or one piece of a larger one; the file holds 2 x world size slots,
# and a container's /dev/shm is often 64 MiB.
MAX_SLOT_BYTES = 8 << 20
OFFER_BYTES = 1024  # rank 0's folder and token, as a fixed-size tensor every rank receives
PREFIX = "trainer-allreduce-"


class SharedMemoryAllReduce:
    """Sums tensors across the group through one shared file; every rank calls in the same order."""

    def __init__(self, rank: int, world_size: int, data: torch.Tensor, readers: dict[int, int],
                 writers: dict[int, int], timeout_s: float):
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.slot_bytes = data.numel() // (2 * world_size)
        # [parity][rank][bytes]: two alternating sets, so a rank that has gone on to the next
        # call never overwrites a copy a slower peer is still summing.
        self.slots: torch.Tensor | None = data.view(2, world_size, self.slot_bytes)
        self.readers, self.writers = readers, writers
        self.calls = 0

    @classmethod
    def connect(cls, group, rank: int, world_size: int, slot_bytes: int, timeout_s: float, wanted: bool = True,
                shm_dir: Path = SHM_DIR) -> "SharedMemoryAllReduce | None":
        """Set up through the group's own collectives (a ProcessGroup), which every rank of it must
        call, `wanted` or not; None on every rank alike unless every rank wants it and can share
        rank 0's memory. Collectives rather than the store: torchrun keeps one store across its
        restarts of the workers, and a peer that dies here fails a collective at once."""
        if world_size < 2 or slot_bytes <= 0:
            return None
        slot_bytes = -(-slot_bytes // 64) * 64  # every slot starts on a cache line, and fits any dtype's alignment
        folder, lock = None, None
        readers: dict[int, int] = {}
        writers: dict[int, int] = {}
        try:
            if rank == 0 and wanted:
                _sweep(shm_dir)
                folder, lock = _offer(shm_dir, world_size, slot_bytes) or (None, None)
            offer = _broadcast_text(group, rank, f"{folder}\n{(folder / 'token').read_text()}" if folder else "")
            if rank != 0 and offer:
                where, token = offer.split("\n")
                if wanted and _is_rank0s(Path(where), token, shm_dir):
                    folder = Path(where)
            if not _everyone(group, folder is not None):
                return None
            # Read ends first (a non-blocking open needs no writer yet), then, once every rank has
            # its read ends, the write ends: a pipe then reads as ended only when its writer's
            # process has.
            opened = _open_pipes(folder, rank, world_size, os.O_RDONLY, readers, lambda peer: f"pipe-{peer}-{rank}")
            if not _everyone(group, opened):
                return None
            opened = _open_pipes(folder, rank, world_size, os.O_WRONLY, writers, lambda peer: f"pipe-{rank}-{peer}")
            try:
                data = torch.from_file(str(folder / "data"), shared=True, size=2 * world_size * slot_bytes,
                                       dtype=torch.uint8)
            except RuntimeError:
                opened = False
            if not _everyone(group, opened):
                return None
            reducer = cls(rank, world_size, data, readers, writers, timeout_s)
            readers, writers = {}, {}  # the reducer's now
            return reducer
        finally:
            for fd in (*readers.values(), *writers.values()):
                os.close(fd)
            # Every rank has its files open, or gave up: nothing stays. Any rank that knows the
            # folder removes it, so a rank 0 killed here (no finally runs) leaves nothing either.
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            if lock is not None:
                os.close(lock)

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the group, in place; every rank ends with the same bits. A tensor
        larger than a slot goes in slot-sized pieces."""
        if self.slots is None:
            raise RuntimeError("this shared-memory all-reduce was closed")
        flat = tensor.view(-1)
        per_slot = self.slot_bytes // flat.element_size()
        for piece in flat.split(per_slot):
            parity = self.calls % 2
            self.calls += 1
            nbytes = piece.numel() * piece.element_size()
            slots = self.slots[parity, :, :nbytes].view(piece.dtype)
            slots[self.rank].copy_(piece)
            self._wait_for_peers()
            torch.sum(slots, dim=0, out=piece)
        return tensor

    def _wait_for_peers(self) -> None:
        for peer, fd in self.writers.items():
            try:
                os.write(fd, b"\0")
            except BrokenPipeError:
                raise _gone(peer) from None
        waiting = {fd: peer for peer, fd in self.readers.items()}
        poller = select.poll()  # of the pipes still awaited: a peer already a call ahead is not read twice
        for fd in waiting:
            poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + self.timeout_s
        while waiting:
            left = deadline - time.monotonic()
            ready = poller.poll(left * 1000) if left > 0 else []
            if not ready:
                raise PeerLost(f"rank(s) {sorted(waiting.values())} did not reach the shared-memory all-reduce "
                               f"within {self.timeout_s:g}s")
            for fd, _ in ready:
                if fd in waiting:
                    if not os.read(fd, 1):
                        raise _gone(waiting[fd])
                    del waiting[fd]
                    poller.unregister(fd)

    def close(self) -> None:
        for fd in (*self.readers.values(), *self.writers.values()):
            os.close(fd)
        self.readers, self.writers, self.slots = {}, {}, None


def _gone(peer: int) -> PeerLost:
    return PeerLost(f"rank {peer} left the shared-memory all-reduce (its process ended)")


def ddp_hook(state: SharedMemoryAllReduce, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook (`register_comm_hook(state, ddp_hook)`): the mean of the bucket's
    gradients, as DDP's own hook gives."""
    buffer = state.all_reduce_(bucket.buffer().div_(state.world_size))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return fut


def slot_bytes_for(model: torch.nn.Module) -> int:
    """Room for the model's whole gradient in one slot, up to MAX_SLOT_BYTES."""
    return min(sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad), MAX_SLOT_BYTES)


def bucket_cap_mb(slot_bytes: int) -> float:
    """DDP's bucket cap for these slots: one bucket for a model that fits one (every rank waits
    for its peers at each bucket, so fewer is better), else buckets about a slot's size."""
    return slot_bytes / (1 << 20)


def _offer(shm_dir: Path, world_size: int, slot_bytes: int) -> tuple[Path, int] | None:
    """Rank 0's private folder with the data file and the pipes, and the descriptor holding its
    lock (an flock, which the kernel drops when the process dies, however it dies); None where
    it cannot be had."""
    if not shm_dir.is_dir():
        return None
    try:
        # Made under a hidden name and locked before it gets the name _sweep looks at, so no
        # sweep takes a folder that is still being made for an unlocked one.
        making = Path(tempfile.mkdtemp(prefix="." + PREFIX, dir=shm_dir))  # mode 0700
    except OSError:
        return None
    lock = None
    try:
        lock = os.open(making, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        folder = shm_dir / making.name[1:]
        os.rename(making, folder)
        making = folder
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
        shutil.rmtree(making, ignore_errors=True)
        if lock is not None:
            os.close(lock)
        return None
    return folder, lock


def _sweep(shm_dir: Path) -> None:
    """Remove the folders of set-ups whose rank 0 died before any peer learnt of them: this
    user's, no longer locked. In a pod, the chart's /dev/shm volume outlives a container's
    restart, so the restarted rank 0 finds them here."""
    try:
        entries = [p for p in shm_dir.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return
    for entry in entries:
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live set-up's
            shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)


def _is_rank0s(folder: Path, token: str, shm_dir: Path) -> bool:
    """Whether this rank sees rank 0's folder itself: in its own /dev/shm (not a namesake in
    another host's), a real folder of this user's that no one else can open, holding the token."""
    try:
        info = folder.lstat()
        return (folder.parent == shm_dir and stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                and stat.S_IMODE(info.st_mode) == 0o700 and (folder / "token").read_text() == token)
    except OSError:
        return False


def _broadcast_text(group, rank: int, text: str) -> str:
    buffer = torch.zeros(OFFER_BYTES, dtype=torch.uint8)
    if rank == 0:
        raw = text.encode()[:OFFER_BYTES]
        buffer[:len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    group.broadcast(buffer, 0).wait()
    return bytes(buffer.tolist()).rstrip(b"\0").decode()


def _everyone(group, yes: bool) -> bool:
    """Whether every rank says yes; a collective, so also a barrier."""
    flag = torch.tensor([1 if yes else 0], dtype=torch.int32)
    group.allreduce([flag], dist.ReduceOp.MIN).wait()
    return bool(flag.item())


def _open_pipes(folder: Path, rank: int, world_size: int, mode: int, into: dict[int, int], name) -> bool:
    try:
        for peer in range(world_size):
            if peer != rank:
                into[peer] = os.open(folder / name(peer), mode | os.O_NONBLOCK)
    except OSError:
        return False
    return True
