"""The training operator's contract with a PyTorchJob's pods, as `generator run` plays it and
`convert` explains it: the env it injects, which exits it restarts (per role, under
runPolicy.backoffLimit), and when the job has succeeded (the Master; without one, every Worker,
or any Worker of an elastic job)."""
from __future__ import annotations

from dataclasses import dataclass

from generator.local.policy import Policy

# The port the operator gives the `pytorch` container (and MASTER_PORT) unless the container names
# one so; the chart's `port` defaults to it (tests/generator/kinds/pytorchjob/test_contract.py holds them equal).
MASTER_PORT, PORT_NAME = 23456, "pytorchjob-port"
SAME_FAILURES = 5  # without a backoffLimit, this many identical failures in a row stop the job
# The launch contract, shown by `run --dry-run` for each replica.
CONTRACT_ENV = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
                "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND")


@dataclass(frozen=True)
class JobEnv:
    """What the operator's env says of the whole job, alike in every pod (operator_env adds its rank)."""
    pods: int
    per_pod: int  # processes per pod: WORLD_SIZE is pods × per_pod
    nproc: str  # spec.nprocPerNode, as the operator passes it on
    port: int  # the Master's
    elastic: dict | None  # spec.elasticPolicy
    has_master: bool
    rdzv: str  # the elastic rendezvous endpoint, host:port
    master: str = "127.0.0.1"  # the Master's address: loopback for processes, its Service's name for containers


def operator_env(job: JobEnv, rank: int) -> dict[str, str]:
    """The variables training-operator v1.9 injects into the pod of node rank `rank`."""
    env = {"PYTHONUNBUFFERED": "1"}
    if job.has_master:
        env.update(MASTER_ADDR=job.master, MASTER_PORT=str(job.port), WORLD_SIZE=str(job.pods * job.per_pod),
                   RANK=str(rank), PET_MASTER_ADDR=job.master, PET_MASTER_PORT=str(job.port), PET_NODE_RANK=str(rank))
    env["PET_NPROC_PER_NODE"] = job.nproc
    elastic = job.elastic
    if elastic:
        low, high = elastic.get("minReplicas", job.pods), elastic.get("maxReplicas", job.pods)
        env.update(PET_NNODES=f"{low}:{high}", PET_RDZV_ENDPOINT=job.rdzv, PET_RDZV_BACKEND=elastic.get("rdzvBackend", "c10d"))
        if elastic.get("maxRestarts") is not None:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if elastic.get("rdzvId"):
            env["PET_RDZV_ID"] = str(elastic["rdzvId"])
    elif job.has_master:
        env["PET_NNODES"] = str(job.pods)
    return env


def retryable(policy: str, code: int) -> bool:
    """Whether the operator restarts a replica that exited with `code` under `policy`."""
    if code == 0:
        return policy == "Always"
    if policy in ("Always", "OnFailure"):
        return True
    if policy == "ExitCode":
        return 128 <= code <= 255  # 1-127 are permanent failures
    return False


@dataclass
class OperatorPolicy(Policy):
    backoff_limit: int | None  # runPolicy.backoffLimit: restarts of all replicas together
    has_master: bool
    elastic: bool = False  # with no Master's success to wait for, one Worker's success ends an elastic job
    shown_env = CONTRACT_ENV

    def headline(self, plan) -> str:
        return f"job {plan.job}: {len(plan.replicas)} replica(s), outputs under {plan.run_dir}"

    def succeeded(self, states: list) -> str:
        if self.has_master:
            return "the Master succeeded" if states[0].status == "Succeeded" else ""
        if self.elastic:  # training-operator v1.9.4: under elasticPolicy, the first Worker to succeed ends it
            return "a Worker succeeded (elastic)" if any(s.status == "Succeeded" for s in states) else ""
        return "every Worker succeeded" if all(s.status == "Succeeded" for s in states) else ""

    def failed(self, runner, state, code: int, ran: float):
        policy = state.replica.restart_policy
        if not retryable(policy, code):
            why = {"Never": "restartPolicy Never", "ExitCode": f"exit code {code} is permanent under restartPolicy ExitCode"}
            return runner.fail(state, why.get(policy, "not restarted"))
        used, limit = runner.counts["restarts"], self.backoff_limit
        if limit is not None and used >= limit:
            return runner.fail(state, f"BackoffLimitExceeded: {used} restart(s) used, runPolicy.backoffLimit is {limit}")
        failure = (code, state.tail[-1] if state.tail else "")
        state.same = state.same + 1 if failure == state.last_failure else 1
        state.last_failure = failure
        if limit is None and state.same >= SAME_FAILURES:
            return runner.fail(state, f"it failed {state.same} times in a row the same way; a cluster would keep "
                                      "restarting it: fix the cause, or set runPolicy.backoffLimit to choose how many "
                                      "restarts a run gets")
        runner.counts["restarts"] += 1
        runner.restart(state, ran, f"exited with code {code}; restarting (restartPolicy {policy}, restart "
                                   f"{state.restarts + 1}")
        return None
