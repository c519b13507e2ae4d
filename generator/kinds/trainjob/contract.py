"""Trainer v2's contract with a TrainJob's nodes, as `generator run` plays it: JobSet's restarts
(a failed node counts against its node Job's backoffLimit; past it, the whole set restarts while
failurePolicy.maxRestarts allows) and its success (every node succeeds)."""
from __future__ import annotations

from dataclasses import dataclass

from generator.kinds.trainjob.runtime import KIND, RESERVED_ENV
from generator.local.policy import Policy


@dataclass
class JobSetPolicy(Policy):
    node_backoff_limit: int  # failed node starts the node Job takes before it fails
    max_set_restarts: int  # JobSet failurePolicy.maxRestarts: whole-set restarts before the TrainJob fails
    shown_env = (*RESERVED_ENV, "JOB_COMPLETION_INDEX")  # the torch plugin's variables, and the Indexed Job's

    def headline(self, plan) -> str:
        then = (f"then JobSet restarts every node, up to {self.max_set_restarts} time(s)" if self.max_set_restarts
                else "then the TrainJob fails (failurePolicy.maxRestarts 0)")
        return (f"{KIND.lower()} {plan.job}: {len(plan.replicas)} node(s) as Trainer v2 runs them: it succeeds when every "
                f"node succeeds; the node Job restarts failed nodes {self.node_backoff_limit} time(s) (its backoffLimit), "
                f"{then}; outputs under {plan.run_dir}")

    def succeeded(self, states: list) -> str:
        return "every node succeeded" if all(s.status == "Succeeded" for s in states) else ""

    def failed(self, runner, state, code: int, ran: float):
        """A failed node is started again (the kubelet under OnFailure, a new pod from the Job under
        Never) until its Job's backoffLimit; past it the Job fails, and JobSet restarts every node
        while failurePolicy.maxRestarts allows, else the job fails."""
        counts = runner.counts
        counts["node_failures"] += 1
        failures = counts["node_failures"]
        if failures > self.node_backoff_limit:
            if counts["set_restarts"] >= self.max_set_restarts:
                return runner.fail(state, f"the node Job failed: {failures} node failure(s), its backoffLimit is "
                                          f"{self.node_backoff_limit}, and failurePolicy.maxRestarts "
                                          f"{self.max_set_restarts} allows no further restart of the set")
            counts["set_restarts"] += 1
            runner.restart_all(state, f"exited with code {code}; the node Job failed, so every node restarts (JobSet "
                                      f"restart {counts['set_restarts']} of {self.max_set_restarts})")
            counts["node_failures"] = 0  # new Jobs count their failures afresh
            return None
        how = "a new pod replaces it" if state.replica.restart_policy == "Never" else "restarting it"
        runner.restart(state, ran, f"exited with code {code}; {how} (node failure {failures}, the node Job's "
                                   f"backoffLimit is {self.node_backoff_limit}")
        return None
