"""The process that owns a local cluster: it runs the bring-up's steps in the order their
declarations give (bringup.py), keeps DIR/state.json current, marks the cluster degraded when a
child exits, and on SIGTERM stops every child, last started first. `generator cluster up` starts
it in the background.

    python -m generator.controlplane.supervisor DIR [-f operator-values.yaml] [--no-operator] [--trainer]
        [--kueue [--kueue-quota QUOTA]] [--node JSON] [--within SECONDS]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from generator import trusted
from generator.controlplane import bringup, components, firewall, network, processes, requests, state
from generator.controlplane.layout import Layout
from generator.controlplane.releases import kueue
from generator.controlplane.state import ClusterState, NodeOptions, NodeState, Process


class Supervisor:
    def __init__(self, layout: Layout, operator_values: dict | None, node: NodeOptions, trainer: bool = False,
                 kueue: bool = False, kueue_quota: dict[str, str] | None = None, within: float = 600):
        self.layout = layout
        # Every step's wait takes what `cluster up --timeout` has left, never a fixed minute of its own:
        # a loaded machine is slow at every step, and the user's timeout is the one figure they chose.
        self.end = time.monotonic() + within
        self.trainer = trainer  # Kubeflow Trainer's release too
        self.kueue = kueue  # Kueue's release too
        self.kueue_quota = kueue_quota  # the ClusterQueue's quota beyond the node's; None: no queues
        self.operator_values = operator_values  # None: no operator release
        self.node = node
        self.children: dict[str, processes.Child] = {}
        self.stopping = threading.Event()
        self.state = ClusterState()
        self.network: network.PodNetwork | None = None
        self.config: components.ControlPlane | None = None  # chosen by the certificates step
        self.step: bringup.Step | None = None  # the bring-up step under way
        self.real_nodes: dict = {}  # name -> realnode.config.RealNode, in order (the node step describes them)
        self.gpu_keepers: set[str] = set()  # the nodes whose GPUs a keeper thread puts back
        self._lock = threading.RLock()  # the other nodes boot side by side

    def left(self) -> float:
        """Seconds the bring-up has left of `cluster up`'s timeout."""
        return processes.left(self.end)

    # --- state -------------------------------------------------------------------------------
    def save(self, **changes) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self.state, name, value)
            self.state.processes = {n: Process(c.pid, str(c.log)) for n, c in self.children.items()}
            state.save(self.layout.state_file, self.state)

    def save_node(self, name: str, phase: str) -> None:
        with self._lock:
            nodes = {n: self.state.nodes.get(n) for n in self.real_nodes}
            nodes[name] = NodeState(phase, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            self.save(nodes={n: s for n, s in nodes.items() if s is not None})

    def start(self, component: components.Component, node: str | None = None) -> processes.Child:
        """Start a component (one of `node`'s, keyed `NAME@NODE`) and record it."""
        # A process its step does not declare would be missing from the stop order, and left running.
        declared = self.step.starts if self.step else bringup.NODE_PROCESSES if node else ()
        if component.name not in declared:
            where = f"bring-up step {self.step.name!r}" if self.step else "no bring-up step"
            raise RuntimeError(f"{where} starts {component.name!r}, which it does not declare in its `starts`")
        components.write_files(component)
        env = {**os.environ, **component.env} if component.env else None
        key = node_key(component.name, node)
        child = processes.start(key, component.argv, self.layout.logs, env)
        with self._lock:
            self.children[key] = child
        self.save()
        return child

    def node_children(self, node: str) -> dict[str, processes.Child]:
        """The node's processes, by program (kubelet, containerd, kube-proxy)."""
        return {k.split("@", 1)[0]: c for k, c in self.children.items() if k.endswith(f"@{node}")}

    def first_kubelet(self) -> processes.Child:
        return self.node_children(next(iter(self.real_nodes)))["kubelet"]

    # --- the control plane -------------------------------------------------------------------
    def run(self) -> int:
        self.state.pid = os.getpid()
        self.layout.create()
        self.save()
        try:
            self._bring_up()
        except Exception as exc:  # up reports it; down finds nothing left running
            self.save(phase="failed", error=_short(exc))
            traceback.print_exc()
            self.stop()
            return 1
        self.step = None
        self.save(phase="ready")
        print("cluster ready", flush=True)
        while not self.stopping.wait(0.25):
            requests.serve(self)
            killed = {n for n, s in self.state.nodes.items() if s.phase == "killed"}
            dead = [n for n, c in self.children.items() if not c.alive() and n.partition("@")[2] not in killed]
            if dead and self.state.phase == "ready":
                self.save(phase="degraded", error=", ".join(
                    f"{n} exited with {self.children[n].proc.returncode} (log {self.children[n].log})" for n in dead))
        self.stop()
        return 0

    def _bring_up(self) -> None:
        steps = bringup.steps(with_operator=self.operator_values is not None, with_trainer=self.trainer,
                              with_kueue=self.kueue, nodes=self.node.count)
        for number, step in enumerate(steps, 1):
            print(f"step {number}/{len(steps)}: {step.name}", flush=True)
            self.step = step
            self.save(step=step.name)
            step.run(self)

    def stop(self) -> None:
        self.stopping.set()
        for name in bringup.stop_order():
            mine = [(k, c) for k, c in self.children.items() if k.split("@", 1)[0] == name]
            if name == "containerd":  # every node's containers end first, side by side
                from generator.controlplane.realnode import node as real_node

                real_node.stop_containers([self.real_nodes[k.partition("@")[2]].folders for k, c in mine if c.alive()])
            for _, child in mine:
                child.stop(grace=30 if name == "kubelet" else 10)
        # The node's containers, mounts, cgroups and the kernel settings it changed.
        from generator.controlplane.realnode import host

        done, problems = host.teardown(self.layout.root)
        for line in [*done, *(f"warning: {p}" for p in problems)]:
            print(f"node: {line}", flush=True)
        if self.network is not None:
            self.network.delete()
            firewall.open_(self.network.bridge)
        self.save(phase="stopped")


def node_key(program: str, node: str | None) -> str:
    """A node's process is known as PROGRAM@NODE (its log: logs/PROGRAM@NODE.log)."""
    return f"{program}@{node}" if node else program


def _short(exc: Exception) -> str:
    """One line for `cluster up` to print: an API refusal's own message, else the exception's."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return f"{exc.__class__.__name__}: {json.loads(body).get('message')}"
        except (ValueError, AttributeError):
            pass
    return str(exc)


def from_argv(argv: list[str] | None = None) -> Supervisor:
    """The supervisor `cluster up` asked for on its command line (lifecycle._supervisor_argv)."""
    parser = argparse.ArgumentParser(prog="python -m generator.controlplane.supervisor")
    parser.add_argument("dir", type=Path)
    parser.add_argument("-f", "--values", type=Path, help="values for charts/pytorch-operator")
    parser.add_argument("--no-operator", action="store_true", help="install no operator release")
    parser.add_argument("--trainer", action="store_true", help="install Kubeflow Trainer v2 with JobSet")
    parser.add_argument("--kueue", action="store_true", help="install Kueue and its queues")
    parser.add_argument("--kueue-quota", type=kueue.parse_quota, default={}, metavar="QUOTA",
                        help="the ClusterQueue's quota (releases/kueue.parse_quota), `none` for no queues")
    parser.add_argument("--node", type=NodeOptions.decode, default=NodeOptions(), metavar="JSON",
                        help="the node's options (state.NodeOptions), as `cluster up` encodes them")
    parser.add_argument("--within", type=float, default=600, metavar="SECONDS",
                        help="what `cluster up --timeout` leaves the bring-up: every step's wait ends by then")
    args = parser.parse_args(argv)
    values = None
    if not args.no_operator:
        # The same reader `cluster up` checked the file with (Helm's rules, not YAML 1.1's).
        from generator.job import values_io

        values = values_io.load_mapping(str(args.values), "operator values") if args.values else {}
    return Supervisor(Layout(trusted.absolute(args.dir)), values, args.node, args.trainer, args.kueue, args.kueue_quota,
                      args.within)


def main(argv: list[str] | None = None) -> int:
    supervisor = from_argv(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: supervisor.stopping.set())
    code = supervisor.run()
    print(json.dumps({"phase": supervisor.state.phase}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
