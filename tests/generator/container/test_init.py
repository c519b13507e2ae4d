"""A container's program under init.py: nothing it starts outlives it or the process that started
it, whatever it does to its session, and stopping it still gives its children the grace period."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from generator.container.process import Process, pid_namespaces
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(not pid_namespaces(), reason="this machine makes no PID namespaces")


def alive(marker: str) -> list[int]:
    """The `sleep MARKER` processes: argv exactly that, so neither the shells nor init.py, whose
    arguments also hold it, count."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read() == f"sleep\0{marker}\0".encode():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def gone(marker: str, within: float = 5.0) -> bool:
    return wait_for(lambda: not alive(marker), within, f"every `sleep {marker}` to end", interval=0.05)


@pytest.fixture
def marker():
    """A unique `sleep` argument: our escaped processes are found by it, and killed if the test fails."""
    mark = f"{1000 + uuid.uuid4().int % 1000}.{os.getpid()}"
    yield mark
    for pid in alive(mark):
        os.kill(pid, signal.SIGKILL)


def escaping(mark: str) -> str:
    """A shell that starts a process in a session of its own, out of its process group."""
    return f"setsid sleep {mark} & echo started; "


def test_what_a_program_started_in_its_own_session_ends_with_it(marker):
    lines = []
    proc = Process(["sh", "-c", escaping(marker) + "sleep 0.5; exit 4"], dict(os.environ), lines.append, isolate=True)
    assert proc.wait(10) == 4
    assert gone(marker), "a process in its own session outlived the program"
    assert lines == ["started"]


def test_a_stop_passes_the_signal_on_and_waits_for_the_children_within_the_grace_period(marker):
    """The shell dies of SIGTERM at once; the child that traps it still gets to finish."""
    script = f"sh -c 'trap \"sleep 0.5; echo child done; exit 0\" TERM; sleep {marker} & wait' & sleep 0.3; echo up; wait"
    lines = []
    proc = Process(["sh", "-c", script], dict(os.environ), lines.append, isolate=True)
    wait_for(lambda: "up" in lines, 10, "the program to say it is up", interval=0.05)
    assert proc.stop(grace=10) == 128 + signal.SIGTERM
    assert "child done" in lines
    assert gone(marker)


def test_everything_dies_with_the_process_that_started_it_even_on_kill_9(marker, tmp_path):
    """As `generator run` killed with SIGKILL: it gets no chance to stop anything itself."""
    starter = tmp_path / "starter.py"
    starter.write_text(textwrap.dedent(f"""
        import os, sys, time
        from generator.container.process import Process
        Process(["sh", "-c", {escaping(marker) + f"sleep {marker}"!r}], dict(os.environ), print, isolate=True)
        print("ready", flush=True)
        time.sleep(300)
    """))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    parent = subprocess.Popen([sys.executable, str(starter)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout.readline() == "ready\n"
        wait_for(lambda: len(alive(marker)) == 2, 10, f"both `sleep {marker}` processes to start", interval=0.05)
    finally:
        parent.kill()
        parent.wait()
    assert gone(marker), "the program outlived the process that started it"


def test_a_program_that_is_not_there_fails_to_start_as_without_init(tmp_path):
    with pytest.raises(FileNotFoundError):
        Process(["no-such-program-here"], dict(os.environ), print, isolate=True)
    with pytest.raises(FileNotFoundError):
        Process(["./missing.sh"], dict(os.environ), print, cwd=tmp_path, isolate=True)


def test_exit_codes_read_as_a_runtime_reports_them():
    assert Process(["sh", "-c", "exit 3"], dict(os.environ), print, isolate=True).wait(10) == 3
    assert Process(["sh", "-c", "kill -9 $$"], dict(os.environ), print, isolate=True).wait(10) == 137


def test_programs_in_namespaces_of_their_own_still_have_pids_no_other_program_has():
    """torchrun tells nodes apart by host name and PID; every namespace starting its program as
    PID 2 made two nodes on one host one node to its rendezvous."""
    outs: list[list[str]] = [[], [], []]
    procs = [Process([sys.executable, "-c", "import os, time; print(os.getpid()); time.sleep(0.5)"],
                     dict(os.environ), out.append, isolate=True) for out in outs]
    assert [p.wait(10) for p in procs] == [0, 0, 0]
    pids = [int(out[0]) for out in outs]
    assert len(set(pids)) == 3 and 2 not in pids, pids


# The shell's own /proc entry, then a child's: under a /proc of the namespace, each names itself.
# The child is read once it has exec'd sleep (until then it is a copy of the shell), trying for
# about 5 s (a loaded machine can take that long to exec): under the host's /proc, $! names some
# other process and never becomes sleep.
PROC_PROBE = ("tr '\\0' ' ' < /proc/$$/cmdline; echo; sleep 30 & n=0; "
              "while read -r c < /proc/$!/comm; [ \"$c\" != sleep ] && [ $n -lt 500 ]; do n=$((n+1)); sleep 0.01; done; "
              "tr '\\0' ' ' < /proc/$!/cmdline; echo; kill $!")


def test_the_program_sees_a_proc_of_its_own_namespace():
    lines = []
    proc = Process(["sh", "-c", PROC_PROBE], dict(os.environ), lines.append, isolate=True)
    assert proc.wait(60) == 0
    assert lines == [f"sh -c {PROC_PROBE} ", "sleep 30 "]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="running as another user needs root and setpriv")
def test_an_unprivileged_program_sees_a_proc_of_its_own_namespace_too():
    """As nobody: the PID namespace is made inside a user namespace, and so is the mount of /proc."""
    from generator.container.process import INIT

    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", os.path.realpath(sys.executable),
                           "-I", "-S", str(INIT), str(os.getpid()), "--", "sh", "-c", PROC_PROBE],
                          capture_output=True, text=True, timeout=30, cwd="/")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [f"sh -c {PROC_PROBE} ", "sleep 30 "]
