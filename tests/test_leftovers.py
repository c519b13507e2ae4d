"""The suite's own guarantee (tests/support/leftovers.py): a test stopped by pytest-timeout leaves
no process behind, whichever way it started them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

from tests.support import ROOT, leftovers, local_jobs

HANGING_TEST = '''
import os, subprocess, sys, time

from generator.container.ports import free_port
from generator.kinds.trainjob.contract import JobSetPolicy
from generator.local import plan as local_plan
from generator.local import runner as local_run
from tests.support import local_jobs

MARK = {local_jobs.MARKER: os.environ["LEFTOVER_MARK"]}
SLEEP = "import time; print('up', flush=True); time.sleep(300)"


def test_hangs_with_processes_of_every_kind_running(tmp_path):
    # `generator run` in a child process, whose replica is its own child
    body, _ = local_jobs.job("child", SLEEP)
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": local_jobs.MARKER, "value": MARK[local_jobs.MARKER]}]
    subprocess.Popen([sys.executable, "-m", "generator", "run", local_jobs.write(tmp_path, body)], cwd=tmp_path,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # an orphan with an environment of its own (no test marker): its parent exits at once
    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                    "'import time; time.sleep(300)'], start_new_session=True)"], env=MARK, check=True)
    # the runner in this process: torchrun waiting for a second node that never comes, and a sleeper
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "0", "--nproc-per-node",
                "1", "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--no-python",
                sys.executable, "-c", "print('never')"]
    replicas = [local_plan.Replica("node-0-0", "Node", 0, "OnFailure", torchrun, dict(MARK)),
                local_plan.Replica("node-0-1", "Node", 1, "OnFailure", [sys.executable, "-c", SLEEP], dict(MARK))]
    plan = local_plan.Plan("hang", tmp_path / "run", replicas, JobSetPolicy(0, 0), None, [])
    local_run.Runner(plan, out=local_jobs.Sink()).run()
'''


def test_a_test_stopped_by_its_timeout_leaves_no_process(tmp_path):
    mark = uuid.uuid4().hex
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\n")
    (inner / "conftest.py").write_text("from tests.support.leftovers import no_process_outlives_its_test  # noqa: F401\n")
    (inner / "test_hang.py").write_text(textwrap.dedent(HANGING_TEST))
    # Without this test's own marker: what the inner run leaves must be left by the inner run's fixture.
    env = {k: v for k, v in os.environ.items() if k != leftovers.TEST_MARKER}
    env.update(PYTHONPATH=str(ROOT), LEFTOVER_MARK=mark)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--timeout", "10", "--rootdir", str(inner), str(inner)],
                          cwd=inner, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "Failed: Timeout (>10.0s) from pytest-timeout" in out, out[-3000:]
    assert "Captured processes killed at teardown" in out and "torch.distributed.run" in out, out[-3000:]
    assert local_jobs.alive(mark) == []


def test_the_suite_times_out_by_signal_so_that_teardown_runs(request):
    """pytest-timeout's thread method ends the whole process at once: no teardown, no clean-up."""
    if not request.config.pluginmanager.has_plugin("timeout"):
        return
    import pytest_timeout

    assert pytest_timeout.get_env_settings(request.config).method == "signal"
