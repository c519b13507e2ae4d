"""Gradients summed through shared memory: the same bits on every rank, nothing left behind in
/dev/shm, the backend kept wherever memory is not shared, and a lost peer noticed at once. The
ranks are threads here, each with a real gloo group of its own, or real processes."""
import datetime
import os
import stat
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

from tests.support import trainer_procs
from trainer import allreduce, distributed
from trainer.model import Net


def on_ranks(world, fn):
    """fn(rank) on one thread per rank, as the ranks of one group; the first error is raised."""
    errors = []

    def body(rank):
        try:
            fn(rank)
        except BaseException as exc:  # noqa: BLE001 (re-raised below)
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]


def gloo_groups(world, port=None):
    """A gloo group per rank over one TCPStore, as init_process_group makes them."""
    port = port or trainer_procs.free_port()
    master = dist.TCPStore("127.0.0.1", port, world, is_master=True, wait_for_workers=False)
    stores = [master] + [dist.TCPStore("127.0.0.1", port, world, is_master=False) for _ in range(world - 1)]
    groups = [None] * world

    def join(rank):
        groups[rank] = dist.ProcessGroupGloo(stores[rank], rank, world, datetime.timedelta(seconds=30))
    on_ranks(world, join)
    return groups


def connect(world, shm_dirs, slot_bytes=1 << 16, timeout=30.0, wanted=None):
    groups = gloo_groups(world)
    reducers = [None] * world

    def join(rank):
        reducers[rank] = allreduce.SharedMemoryAllReduce.connect(
            groups[rank], rank, world, slot_bytes, timeout, wanted=True if wanted is None else wanted[rank],
            shm_dir=shm_dirs[rank])
    on_ranks(world, join)
    return reducers


def sums(world, reducers, groups, inputs):
    """Each case summed by the shared-memory all-reduce and by gloo's own, on every rank."""
    ours = [[x.clone() for x in case] for case in inputs]
    gloos = [[x.clone() for x in case] for case in inputs]

    def reduce(rank):
        for case in ours:
            reducers[rank].all_reduce_(case[rank])
        for case in gloos:
            groups[rank].allreduce([case[rank]]).wait()
    on_ranks(world, reduce)
    return ours, gloos


# Calls of differing sizes and types, so both alternating slot sets are used and reused; the last
# is larger than a slot (64 KiB) and goes in pieces.
CASES = [(torch.float32, 1000), (torch.float32, 16384), (torch.float64, 8), (torch.bfloat16, 777),
         (torch.float32, 3), (torch.float32, 40000)]


def random_inputs(world):
    gen = torch.Generator().manual_seed(world)
    return [[torch.randn(n, generator=gen).to(dtype) for _ in range(world)] for dtype, n in CASES]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_rank_gets_identical_sums_within_rounding_of_gloos(tmp_path, world):
    """Identical on every rank; gloo's to the bit at 2 ranks (one addition, whatever the order);
    from 3 ranks gloo's ring adds in another order, so each element is within the rounding of
    two orders of W - 1 additions: 2 (W - 1) eps x the sum of the magnitudes."""
    groups = gloo_groups(world)
    reducers = [None] * world

    def join(rank):
        reducers[rank] = allreduce.SharedMemoryAllReduce.connect(groups[rank], rank, world, 1 << 16, 30.0,
                                                                 shm_dir=tmp_path)
    on_ranks(world, join)
    assert all(r is not None for r in reducers)
    assert list(tmp_path.iterdir()) == []  # the folder was removed once every rank had opened it
    inputs = random_inputs(world)
    ours, gloos = sums(world, reducers, groups, inputs)
    for case_in, case_ours, case_gloo in zip(inputs, ours, gloos, strict=True):
        for result in case_ours:
            assert torch.equal(result, case_ours[0])  # every rank, the same bits
        if world == 2:
            assert torch.equal(case_ours[0], case_gloo[0])
        else:
            bound = 2 * (world - 1) * torch.finfo(case_ours[0].dtype).eps * torch.stack(case_in).double().abs().sum(0)
            assert bool(((case_ours[0].double() - case_gloo[0].double()).abs() <= bound).all())


def test_ranks_that_do_not_share_memory_keep_the_backend_and_leave_nothing(tmp_path):
    ours, theirs = tmp_path / "host-a", tmp_path / "host-b"
    ours.mkdir()
    theirs.mkdir()
    assert connect(2, [ours, theirs]) == [None, None]  # every rank decides alike
    assert list(ours.iterdir()) == [] and list(theirs.iterdir()) == []


def test_one_rank_asking_for_the_backend_decides_for_all(tmp_path):
    assert connect(3, [tmp_path] * 3, wanted=[True, True, False]) == [None, None, None]
    assert connect(2, [tmp_path] * 2, wanted=[False, True]) == [None, None]
    assert list(tmp_path.iterdir()) == []


def test_no_room_for_the_slots_keeps_the_backend(tmp_path):
    # posix_fallocate refuses 2 x 2 x 2**55 bytes on any file system: no mapping that could SIGBUS later
    assert connect(2, [tmp_path] * 2, slot_bytes=1 << 55) == [None, None]
    assert list(tmp_path.iterdir()) == []


def test_the_shared_folder_is_private_to_the_user(tmp_path):
    folder, _ = allreduce._offer(tmp_path, 2, 4096)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert set(modes) == {"data", "token", "pipe-0-1", "pipe-1-0"}
    assert modes["data"] == modes["pipe-0-1"] == modes["pipe-1-0"] == 0o600
    assert (folder / "data").stat().st_size == 2 * 2 * 4096


def test_a_folder_others_could_open_or_a_link_is_not_taken(tmp_path):
    folder, _ = allreduce._offer(tmp_path, 2, 4096)
    token = (folder / "token").read_text()
    assert allreduce._is_rank0s(folder, token, tmp_path)
    assert not allreduce._is_rank0s(folder, "another token", tmp_path)
    link = tmp_path / "trainer-allreduce-link"
    link.symlink_to(folder)
    assert not allreduce._is_rank0s(link, token, tmp_path)
    folder.chmod(0o755)
    assert not allreduce._is_rank0s(folder, token, tmp_path)


def test_slots_are_rounded_to_cache_lines_for_any_dtype(tmp_path):
    reducers = connect(2, [tmp_path] * 2, slot_bytes=1002)  # a bf16 model's odd size
    assert reducers[0].slot_bytes == 1024
    outputs = [torch.full((256,), 1.5, dtype=torch.float32), torch.full((256,), 2.0, dtype=torch.float32)]
    on_ranks(2, lambda rank: reducers[rank].all_reduce_(outputs[rank]))
    assert torch.equal(outputs[0], torch.full((256,), 3.5)) and torch.equal(outputs[1], outputs[0])


def test_a_peer_that_never_arrives_is_named_after_the_timeout(tmp_path):
    reducers = connect(2, [tmp_path] * 2, timeout=0.5)
    with pytest.raises(distributed.PeerLost, match=r"rank\(s\) \[1\] did not reach the shared-memory all-reduce "
                                                   r"within 0.5s"):
        reducers[0].all_reduce_(torch.ones(4))


def test_a_closed_reducer_refuses_instead_of_summing_alone(tmp_path):
    reducers = connect(2, [tmp_path] * 2)
    reducers[0].close()
    with pytest.raises(RuntimeError, match="this shared-memory all-reduce was closed"):
        reducers[0].all_reduce_(torch.ones(4))


PEER = """
import datetime, pathlib, sys, time
import torch.distributed as dist
from trainer import allreduce
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, is_master=False)
group = dist.ProcessGroupGloo(store, 1, 2, datetime.timedelta(seconds=30))
if sys.argv[3] == "connect":
    assert allreduce.SharedMemoryAllReduce.connect(group, 1, 2, 4096, 30, shm_dir=pathlib.Path(sys.argv[2]))
print("ready", flush=True)
time.sleep(300)
"""


def peer_process(port, shm_dir, what):
    return subprocess.Popen([sys.executable, "-c", PEER, str(port), str(shm_dir), what], env=trainer_procs.base_env(),
                            cwd=trainer_procs.ROOT, stdout=subprocess.PIPE, text=True)


def rank0_group(port):
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=True, wait_for_workers=False)
    return dist.ProcessGroupGloo(store, 0, 2, datetime.timedelta(seconds=30))


def test_a_peer_whose_process_ends_is_noticed_at_once(tmp_path):
    port = trainer_procs.free_port()
    peer = peer_process(port, tmp_path, "connect")
    try:
        reducer = allreduce.SharedMemoryAllReduce.connect(rank0_group(port), 0, 2, 4096, 300.0, shm_dir=tmp_path)
        assert peer.stdout.readline() == "ready\n"
        peer.kill()
        peer.wait()
        started = time.monotonic()
        with pytest.raises(distributed.PeerLost, match=r"^rank 1 left the shared-memory all-reduce \(its process "
                                                       r"ended\)$"):
            reducer.all_reduce_(torch.ones(4))
        assert time.monotonic() - started < 5  # not the 300 s timeout
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()


def test_a_peer_that_dies_while_setting_up_fails_the_group_at_once_and_leaves_nothing(tmp_path):
    port = trainer_procs.free_port()
    peer = peer_process(port, tmp_path, "join")  # joins the group, then never takes part in the set-up
    try:
        group = rank0_group(port)
        assert peer.stdout.readline() == "ready\n"
        peer.kill()
        peer.wait()
        started = time.monotonic()
        with pytest.raises(RuntimeError) as caught:
            allreduce.SharedMemoryAllReduce.connect(group, 0, 2, 4096, 300.0, shm_dir=tmp_path)
        assert distributed.peer_lost(caught.value), caught.value  # the trainer exits 200 and is restarted
        assert time.monotonic() - started < 20
        assert list(tmp_path.iterdir()) == []
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()


def test_slots_hold_the_whole_gradient_up_to_their_cap(monkeypatch):
    model = Net()
    assert allreduce.slot_bytes_for(model) == sum(p.numel() * 4 for p in model.parameters())
    monkeypatch.setattr(allreduce, "MAX_SLOT_BYTES", 1000)
    assert allreduce.slot_bytes_for(model) == 1000


# Rank 0 in a process of its own, killed (SIGKILL: no finally runs) at a point of its set-up.
DYING_RANK0 = """
import datetime, os, pathlib, signal, sys
import torch.distributed as dist
from trainer import allreduce
shm = pathlib.Path(sys.argv[2])
if sys.argv[3] == "while-offering":  # the folder made and locked, no peer told yet
    allreduce._offer(shm, 2, 4096)
    os.kill(os.getpid(), signal.SIGKILL)
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, is_master=True, wait_for_workers=False)
group = dist.ProcessGroupGloo(store, 0, 2, datetime.timedelta(seconds=30))
real = allreduce._everyone
def everyone(group, yes):  # dies after its offer went out, at the first agreement
    os.kill(os.getpid(), signal.SIGKILL)
allreduce._everyone = everyone
allreduce.SharedMemoryAllReduce.connect(group, 0, 2, 4096, 30, shm_dir=shm)
"""


def dying_rank0(port, shm_dir, when):
    return subprocess.run([sys.executable, "-c", DYING_RANK0, str(port), str(shm_dir), when],
                          env=trainer_procs.base_env(), cwd=trainer_procs.ROOT, timeout=60)


def test_a_rank_0_killed_after_its_offer_leaves_nothing_in_shared_memory(tmp_path):
    port = trainer_procs.free_port()
    done = []
    killed = threading.Thread(target=lambda: done.append(dying_rank0(port, tmp_path, "after-offer")), daemon=True)
    killed.start()
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=False)
    group = dist.ProcessGroupGloo(store, 1, 2, datetime.timedelta(seconds=30))
    with pytest.raises(RuntimeError) as caught:
        allreduce.SharedMemoryAllReduce.connect(group, 1, 2, 4096, 30.0, shm_dir=tmp_path)
    assert distributed.peer_lost(caught.value), caught.value
    killed.join(60)
    assert done[0].returncode == -9  # it died where it was meant to
    assert list(tmp_path.iterdir()) == []  # its folder, 2 x W slots, removed by the peer that knew it


def test_a_folder_whose_rank_0_died_before_telling_anyone_goes_at_the_next_set_up(tmp_path):
    assert dying_rank0(trainer_procs.free_port(), tmp_path, "while-offering").returncode == -9
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(allreduce.PREFIX) and (left / "data").stat().st_size == 2 * 2 * 4096
    live, lock = allreduce._offer(tmp_path, 2, 4096)  # another job's set-up, under way on this host
    try:
        reducers = connect(2, [tmp_path] * 2)
        assert all(r is not None for r in reducers)
        assert list(tmp_path.iterdir()) == [live]  # the dead one's gone, the live one's kept
    finally:
        os.close(lock)
