"""A container's first process, as a runtime's init (tini, Docker's --init) is: the program runs in a
PID namespace of its own, so nothing it starts can outlive it, whatever it does to its session, its
process group or its env; and the namespace dies with whoever started it, even on `kill -9`.

    python -I -S init.py PARENT_PID -- PROGRAM ARGS...

Two processes: this one (outside, in the caller's namespaces) and its child, the namespace's PID 1,
which starts PROGRAM. Each dies with its parent (PR_SET_PDEATHSIG), and when PID 1 ends the kernel
kills everything left in the namespace. Signals from the caller reach PID 1, which passes them to
every process in the namespace (as a process-group signal did before). When PROGRAM ends by itself,
the container ends once what it left has ended, or after a few seconds; after a stop signal, PID 1
waits for the rest to finish within the caller's grace period. The exit status is PROGRAM's (128+N for a signal N).

The namespace gets a /proc of its own, in a mount namespace of its own, as a container runtime
gives it: /proc/<getpid()> is the program, and a child's PID names that child (torch's elastic
agent reads /proc/<worker pid>/stat), not whatever host process has that number. Where the kernel
refuses a new /proc (unprivileged, under a /proc partly hidden by other mounts), the host's stays.

Run by path with -I -S, never imported by the program it starts: standard library only."""
import ctypes
import errno
import os
import signal
import sys
import time

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_SLAVE = 0x2, 0x4, 0x8, 0x4000, 0x80000
PR_SET_PDEATHSIG = 1
SETTLE_SECONDS = 5.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def _unshare() -> bool:
    """A new PID namespace for our next child; unprivileged, inside a user namespace that maps only
    our own ids, so the program keeps exactly the rights it had. Then a mount namespace, where we
    may have one: whether we do."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWPID | (0 if uid == 0 else CLONE_NEWUSER)
    if _libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    return _libc.unshare(CLONE_NEWNS) == 0


def _own_proc() -> None:
    """In PID 1, a /proc of this PID namespace over the host's. Mounts stay ours: the host's still
    reach us (slave), ours never reach the host."""
    if _libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None) == 0:
        _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def status(raw: int) -> int:
    return 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _next_pid(pid: int) -> None:
    """Every namespace would start its program as PID 2, and programs on one host tell each other
    apart by host name and PID: torchrun's c10d rendezvous takes two such nodes for one, and a
    2-node job then hangs. So the program gets, inside, the PID its starter has outside: unique on
    the host while it runs. We own the namespace, so we may set where its PIDs continue."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
    except OSError:  # a kernel without it: PIDs repeat across namespaces, as they did before
        pass


def _pid1(argv: list[str], alive: int, unique: int) -> int:
    """The namespace's init: start the program, pass signals on, reap whatever ends."""
    stopping = []

    def forward(sig, _frame):
        stopping.append(sig)
        try:
            os.kill(-1, sig)  # from PID 1: every other process of the namespace
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    _next_pid(unique)
    program = os.fork()
    if program == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.close(alive)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"cannot start {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
            os._exit(127 if exc.errno == errno.ENOENT else 126)
    code, settle = None, None
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG if settle else 0)
        except ChildProcessError:  # nothing left in the namespace
            return code if code is not None else 0
        except InterruptedError:
            continue
        if pid == program:
            code = status(raw)
            if not stopping:
                # What the program left (a launcher's workers closing their connections) gets a
                # moment to end by itself; then the container ends and the kernel kills the rest.
                settle = time.monotonic() + SETTLE_SECONDS
        elif pid == 0:
            if settle and time.monotonic() > settle:
                return code
            time.sleep(0.02)


def main(args: list[str]) -> int:
    parent, argv = int(args[0]), args[2:]
    _die_with_parent()
    if os.getppid() != parent:  # the caller was gone before we could ask to die with it
        return 137
    try:
        mounts = _unshare()
    except OSError as exc:
        print(f"cannot make a PID namespace ({exc}); running without one", file=sys.stderr, flush=True)
        os.execvp(argv[0], argv)
    outer = os.getpid()
    alive_r, alive_w = os.pipe()  # closes when this process dies: PID 1 cannot see our pid, only this
    child = os.fork()
    if child == 0:
        os.close(alive_w)
        _die_with_parent()
        import select
        if select.select([alive_r], [], [], 0)[0]:  # EOF already: we died before the line above
            os._exit(137)
        if mounts:
            _own_proc()
        os._exit(_pid1(argv, alive_r, outer))
    os.close(alive_r)

    def forward(sig, _frame):
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            _, raw = os.waitpid(child, 0)
            return status(raw)
        except InterruptedError:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
