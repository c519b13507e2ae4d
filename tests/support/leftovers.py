"""No process outlives the test that started it, however the test ends: passed, failed, or
stopped by pytest-timeout (whose signal method raises in the test, so fixture teardown runs).

While a test runs, this pytest process is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a
process whose parent dies is re-parented to it instead of to init, so everything the test
started, directly or not (the runner's replicas, torchrun's workers, a `generator run` child's
replicas after it was killed), stays its descendant. The test's environment also carries a
marker of its own, which every process started with an inherited environment keeps. At
teardown every new descendant, and every process carrying the marker, is killed and reaped.
Processes that were already there when the test began (a module fixture's), and what they
start, are left alone, and nothing outside this pytest process's tree or this test's marker is
touched: the machine is shared with other test runs. e2e tests are left out: the control plane
their session starts, and its pods, outlive each test on purpose."""
from __future__ import annotations

import ctypes
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

TEST_MARKER = "PYTORCHJOB_KIT_TEST_ID"
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
KILL_SECONDS = 10.0

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot): a reused pid is another process


def _prctl(option: int, value) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0)


def subreaper(on: bool | None = None) -> bool:
    """Whether this process is a child subreaper; with `on`, make it one or not first."""
    if on is not None and _prctl(PR_SET_CHILD_SUBREAPER, int(on)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    flag = ctypes.c_int(0)
    _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag))
    return bool(flag.value)


def table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, start time, state letter) of every process on the machine."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2:].split()  # after "pid (comm) ", which may hold spaces
        out[int(entry.name)] = (int(fields[1]), int(fields[19]), fields[0].decode())
    return out


def descendants(procs: dict[int, tuple[int, int, str]], root: int, skip: set[Proc] = frozenset()) -> set[Proc]:
    """`root`'s descendants, but neither those in `skip` nor theirs: what a process that was there
    before the test (a session's control plane) starts is its own."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    found: set[Proc] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            proc = (child, procs[child][1])
            if proc not in skip:
                found.add(proc)
                todo.append(child)
    return found


def carrying(procs: dict[int, tuple[int, int, str]], marker: str) -> set[Proc]:
    needle = f"\0{TEST_MARKER}={marker}\0".encode()
    found = set()
    for pid, (_, start, _) in procs.items():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except OSError:
            continue
        if needle in environ or environ.endswith(needle[:-1]):
            found.add((pid, start))
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        return f"{pid} {command[:200]}"
    except OSError:
        return str(pid)


def kill_leftovers(before: set[Proc], marker: str) -> list[str]:
    """SIGKILL every process this test left (see the module's docstring), until none is left, then
    reap the ones that were this process's children. Returns what was killed, as pid and command."""
    me = os.getpid()
    killed: dict[Proc, str] = {}
    end = time.monotonic() + KILL_SECONDS
    while True:
        procs = table()
        live = {p for p in descendants(procs, me, before) | carrying(procs, marker)
                if p not in before and p[0] != me and procs[p[0]][2] not in "ZX"}
        if not live:
            break
        if time.monotonic() > end:
            raise RuntimeError("processes the test started survive SIGKILL: "
                               + "; ".join(_describe(pid) for pid, _ in sorted(live)))
        for pid, start in live:
            killed.setdefault((pid, start), _describe(pid))
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    for pid, (parent, start, state) in table().items():
        if parent == me and state == "Z" and (pid, start) not in before:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # its Popen got there first
                pass
    return sorted(killed.values())


@pytest.fixture(autouse=True)
def no_process_outlives_its_test(request) -> Iterator[str | None]:
    """Autouse (imported by tests/conftest.py): yields the test's marker value. A test whose processes had
    to be killed shows them in its report, under "processes killed at teardown"."""
    if request.node.get_closest_marker("e2e"):  # the cluster's pods and processes outlive a test on purpose
        yield None
        return
    marker = uuid.uuid4().hex
    was_subreaper = subreaper()
    subreaper(True)
    before = descendants(table(), os.getpid())
    old = os.environ.get(TEST_MARKER)
    os.environ[TEST_MARKER] = marker
    try:
        yield marker
    finally:
        if old is None:
            os.environ.pop(TEST_MARKER, None)
        else:
            os.environ[TEST_MARKER] = old
        try:
            killed = kill_leftovers(before, marker)
        finally:
            subreaper(was_subreaper)
        if killed:
            request.node.add_report_section("teardown", "processes killed at", "\n".join(killed))
