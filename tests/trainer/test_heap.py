"""The trainer keeps freed memory for the next step instead of faulting it back in every step."""
import os
import subprocess
import sys
from pathlib import Path

from trainer import heap

ROOT = Path(__file__).resolve().parents[2]
# A step's pattern: 12 MB of activations allocated, written and freed. Without the fixed thresholds
# glibc trims the freed top of its heap each time, and each step faults about 3,000 pages back in.
PROBE = """
import ctypes, resource, sys
from trainer import heap
print(heap.keep_freed_memory(), file=sys.stderr)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
def step():
    blocks = [libc.malloc(3 << 20) for _ in range(4)]
    for block in blocks:
        ctypes.memset(block, 1, 3 << 20)
    for block in blocks:
        libc.free(block)
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 20)
"""


def _faults_per_step(env_extra: dict) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*heap.USER_SETTINGS, "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**env, **env_extra}, capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return int(done.stdout), done.stderr.strip()


def test_steps_take_no_new_page_faults():
    faults, applied = _faults_per_step({})
    assert applied == "True"
    # Without it the same steps fault about 12 MB back in each: compared, not counted, since a
    # page's size (4 KiB, 64 KiB) and transparent huge pages change the count.
    untuned, _ = _faults_per_step({"MALLOC_TRIM_THRESHOLD_": "0"})
    assert untuned > 20 * max(faults, 1)


def test_malloc_settings_of_the_user_win():
    assert _faults_per_step({"MALLOC_TRIM_THRESHOLD_": "0"})[1] == "False"
    assert _faults_per_step({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})[1] == "False"
    # Other tunables are not about malloc: the thresholds are still set.
    faults, applied = _faults_per_step({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert applied == "True" and faults < 50


def test_only_glibc_linux_is_touched(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert heap.keep_freed_memory({}) is False


def _proc(tmp_path, memory_max: str) -> Path:
    """A /proc/self whose v2 cgroup has memory.max `memory_max`."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self/cgroup").write_text("0::/kubepods/pod1/app\n")
    (proc / "self/mountinfo").write_text(f"30 23 0:26 / {tmp_path}/sys rw - cgroup2 cgroup2 rw\n")
    folder = tmp_path / "sys/kubepods/pod1"
    (folder / "app").mkdir(parents=True)
    (folder / "memory.max").write_text(memory_max)
    (folder / "app/memory.max").write_text("max\n")
    return proc


def test_the_heap_keeps_at_most_an_eighth_of_the_containers_memory_limit(tmp_path):
    assert heap.trim_threshold(_proc(tmp_path / "small", f"{2 << 30}\n")) == 256 << 20  # a 2 GiB pod's
    assert heap.trim_threshold(_proc(tmp_path / "large", f"{64 << 30}\n")) == heap.TRIM_THRESHOLD
    assert heap.trim_threshold(_proc(tmp_path / "none", "max\n")) == heap.TRIM_THRESHOLD


def test_a_small_container_gets_its_bound_in_the_process_itself(tmp_path):
    # The process's own thresholds, read back through what glibc then does: a 2 MiB pod keeps no
    # more than 256 KiB of freed heap, so the 12 MB a step frees goes back to the kernel each step.
    proc = _proc(tmp_path, f"{2 << 20}\n")
    probe = PROBE.replace("heap.keep_freed_memory()", f"heap.keep_freed_memory(proc=__import__('pathlib').Path({str(proc)!r}))")
    env = {k: v for k, v in os.environ.items() if k not in (*heap.USER_SETTINGS, "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stderr.strip() == "True"
    bounded = int(done.stdout)
    unbounded, _ = _faults_per_step({})
    assert bounded > 20 * max(unbounded, 1)
