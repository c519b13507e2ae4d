"""`generator run` of a Trainer v2 TrainJob: nodes that each start torchrun with only the PET_*
variables, success when every node succeeds, and JobSet's restarts of the whole set."""
import json
import re
import sys
import uuid

import yaml

from generator.kinds.trainjob.contract import JobSetPolicy
from generator.local import plan as local_plan
from generator.local import runner as local_run
from tests.support import local_jobs, trainjobs
from tests.support.cli_helpers import run
from tests.support.trainjobs import IMAGE

# Each life of a node appends to a file of its own, so a test can script what each life does.
LIFE = ("import os, pathlib, sys, time; p = pathlib.Path(os.environ['LIVES']) / os.environ['PET_NODE_RANK']; "
        "n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); rank = os.environ['PET_NODE_RANK']; ")


Sink = local_jobs.Sink


def nodes_plan(tmp_path, code: str, nodes: int = 2, node_backoff_limit: int = 6, max_set_restarts: int = 0,
               restart: str = "OnFailure") -> tuple[local_plan.Plan, str]:
    """A TrainJob plan whose nodes run `code` directly: the runner's JobSet semantics, without
    torchrun's start-up in every case."""
    marker = "v2" + str(abs(hash((str(tmp_path), code))))
    (tmp_path / "lives").mkdir(parents=True, exist_ok=True)
    replicas = [local_plan.Replica(f"node-0-{i}", "Node", i, restart, [sys.executable, "-c", code],
                                   {"PET_NODE_RANK": str(i), "PET_NNODES": str(nodes), "LIVES": str(tmp_path / "lives"),
                                    local_jobs.MARKER: marker})
                for i in range(nodes)]
    plan = local_plan.Plan("tj", tmp_path / "run", replicas, JobSetPolicy(node_backoff_limit, max_set_restarts), None, [])
    return plan, marker


def lives(tmp_path, rank: int) -> int:
    return len((tmp_path / "lives" / str(rank)).read_text())


def test_the_job_succeeds_only_when_every_node_has(tmp_path):
    plan, marker = nodes_plan(tmp_path, LIFE + "time.sleep(0 if rank == '0' else 1.5)")
    outcome = local_run.Runner(plan, out=Sink()).run()
    assert outcome.succeeded and outcome.reason == "every node succeeded"
    # node 0 finishing first did not end the job, as a Master would in v1: node 1 ran to its end
    assert [s.status for s in outcome.states] == ["Succeeded", "Succeeded"]
    assert local_jobs.alive(marker) == []


def test_a_failed_node_job_restarts_every_node_within_max_restarts(tmp_path):
    # life 1: node 1 fails once node 0 is busy (it waits for node 0's mark, so a slow start under
    # load cannot let node 0 be stopped before its first life counted); life 2: both succeed
    wait_for_0 = "[time.sleep(0.05) for _ in range(600) if not (p.parent / '0').exists()]; "
    code = LIFE + wait_for_0 + "sys.exit(0) if n else (time.sleep(60) if rank == '0' else sys.exit(3))"
    plan, marker = nodes_plan(tmp_path, code, node_backoff_limit=0, max_set_restarts=1)
    sink = Sink()
    outcome = local_run.Runner(plan, out=sink).run()
    assert outcome.succeeded, outcome.reason
    log = "".join(sink.lines)
    assert "node-0-1 | exited with code 3; the node Job failed, so every node restarts (JobSet restart 1 of 1)" in log
    assert (lives(tmp_path, 0), lives(tmp_path, 1)) == (2, 2)  # node 0 was stopped and started anew, not waited for
    assert [s.restarts for s in outcome.states] == [1, 1]
    assert local_jobs.alive(marker) == []


def test_past_max_restarts_the_job_fails_naming_the_node_and_the_policy(tmp_path):
    code = LIFE + "print('fatal: no data'); sys.exit(2) if rank == '1' else time.sleep(60)"
    plan, marker = nodes_plan(tmp_path, code, node_backoff_limit=0, max_set_restarts=1)
    outcome = local_run.Runner(plan, out=Sink()).run()
    assert not outcome.succeeded
    assert outcome.reason.startswith("node-0-1 failed with exit code 2 (the node Job failed: 1 node failure(s), its "
                                     "backoffLimit is 0, and failurePolicy.maxRestarts 1 allows no further restart of "
                                     "the set)")
    assert "    fatal: no data" in outcome.reason
    assert lives(tmp_path, 1) == 2 and local_jobs.alive(marker) == []


def test_within_the_node_jobs_backoff_limit_only_the_failed_node_starts_again(tmp_path):
    code = LIFE + "sys.exit(0) if n or rank == '0' else sys.exit(1)"
    for restart, how in (("OnFailure", "restarting it"), ("Never", "a new pod replaces it")):
        plan, marker = nodes_plan(tmp_path / restart, code, node_backoff_limit=1, restart=restart)
        sink = Sink()
        outcome = local_run.Runner(plan, out=sink).run()
        assert outcome.succeeded, outcome.reason
        assert f"node-0-1 | exited with code 1; {how} (node failure 1, the node Job's backoffLimit is 1)" in "".join(sink.lines)
        assert (lives(tmp_path / restart, 0), lives(tmp_path / restart, 1)) == (1, 2)


def trainjob_file(tmp_path, command: list[str], nodes: int = 2) -> tuple[str, str]:
    """The TrainJob's file and its marker. Its activeDeadlineSeconds ends a run that hangs (nodes
    waiting in torchrun's rendezvous) as a failed job, long before the suite's timeout."""
    marker = uuid.uuid4().hex
    job = trainjobs.trainjob("envs", {"image": IMAGE, "command": command, "numNodes": nodes,
                                      "env": [{"name": local_jobs.MARKER, "value": marker}]}, activeDeadlineSeconds=90)
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path), marker


def test_nodes_get_only_the_pet_variables_and_torchrun_gives_the_ranks(tmp_path):
    show = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', "
            "'PET_NODE_RANK', 'PET_NNODES', 'JOB_COMPLETION_INDEX')}))")
    path, marker = trainjob_file(tmp_path, ["torchrun", "--no-python", sys.executable, "-c", show])
    code, out, err = run("run", path, "--dry-run")
    assert code == 0, err
    env_lines = [line for line in out.splitlines() if line.startswith("    env: ")]
    assert len(env_lines) == 2 and all("PET_NNODES=2" in line for line in env_lines)
    assert not any(re.search(r"\s(RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT)=", line) for line in env_lines)
    # Each node its own rank, checked before torchrun meets them: two alike would wait in its rendezvous.
    ranks = [re.search(r"\sPET_NODE_RANK=(\S+)", line) for line in env_lines]
    assert [m and m.group(1) for m in ranks] == ["0", "1"], env_lines

    code, out, err = run("run", path)
    assert code == 0, err
    seen = {}
    for line in out.splitlines():
        node, _, text = line.partition(" | ")
        if text.startswith("{"):
            seen[node.strip()] = json.loads(text)
    assert seen == {f"node-0-{i}": {"RANK": str(i), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "PET_NODE_RANK": str(i),
                                    "PET_NNODES": "2", "JOB_COMPLETION_INDEX": str(i)} for i in range(2)}
    assert "job succeeded: every node succeeded" in err
    assert local_jobs.alive(marker) == []


def test_a_trainjob_that_does_not_start_through_torchrun_is_refused_before_anything_runs(tmp_path):
    code, out, err = run("run", trainjob_file(tmp_path, ["python", "-m", "trainer"])[0])
    assert code == 1 and out == ""
    assert ("spec.trainer.command: does not start through torchrun, and Trainer v2 sets only the PET_* variables "
            "torchrun reads") in err
    assert not (tmp_path / "runs").exists()
