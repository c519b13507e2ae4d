"""Requests to a running cluster's supervisor, which alone starts and stops the cluster's processes:
`cluster node kill|start` writes one file into DIR/requests (the cluster's folder, 0700) and waits
for the supervisor's answer beside it. The supervisor serves them one at a time, between its
checks of its children."""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from generator import files
from generator.controlplane.layout import Layout
from generator.errors import UserError

if TYPE_CHECKING:
    from generator.controlplane.supervisor import Supervisor

FOLDER = "requests"
ACTIONS = ("kill", "start")
ANSWER_SECONDS = 15.0  # beyond a request's own time: the supervisor may be finishing another


def folder(layout: Layout) -> Path:
    return layout.root / FOLDER


def ask(layout: Layout, action: str, node: str, within: float) -> str:
    """Send `action` for `node` and wait for the answer: its message, or a UserError with the
    supervisor's reason."""
    here = folder(layout)
    here.mkdir(mode=0o700, exist_ok=True)
    ident = uuid.uuid4().hex
    files.write_whole(here / f"{ident}.json", json.dumps({"action": action, "node": node, "within": within}), 0o600)
    answer = here / f"{ident}.done"
    end = time.monotonic() + within + ANSWER_SECONDS
    while time.monotonic() < end:
        if answer.is_file():
            said = json.loads(answer.read_text())
            answer.unlink(missing_ok=True)
            if not said["ok"]:
                raise UserError(said["message"])
            return said["message"]
        time.sleep(0.2)
    (here / f"{ident}.json").unlink(missing_ok=True)
    raise UserError(f"the cluster's supervisor did not answer `{action} {node}` within {within + ANSWER_SECONDS:g}s; "
                    f"its log is {layout.supervisor_log}")


def serve(sup: Supervisor) -> None:
    """Answer every waiting request, oldest first."""
    here = folder(sup.layout)
    if not here.is_dir():
        return
    for path in sorted(here.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd) as handle:
                asked = json.load(handle)
        except (OSError, ValueError):
            continue  # half written, or gone: its writer tries again or gives up
        path.unlink(missing_ok=True)
        try:
            said = {"ok": True, "message": handle_one(sup, asked)}
        except (UserError, RuntimeError, OSError) as exc:
            said = {"ok": False, "message": str(exc)}
        files.write_whole(here / f"{path.stem}.done", json.dumps(said), 0o600)


def handle_one(sup: Supervisor, asked: dict) -> str:
    from generator.controlplane.realnode import node as real_node

    action, name = asked.get("action"), asked.get("node")
    known = list(sup.real_nodes)
    if action not in ACTIONS:
        raise UserError(f"unknown request {action!r}; the supervisor serves {', '.join(ACTIONS)}")
    if name not in known:
        raise UserError(f"node {name!r}: the cluster's nodes are {', '.join(known)}; "
                        "`python -m generator cluster node list` lists them")
    phase = sup.state.nodes[name].phase
    if action == "kill":
        if phase == "killed":
            raise UserError(f"node {name} is killed already; `cluster node start {name}` boots it again")
        began = time.monotonic()
        killed = real_node.kill(sup, name)
        return (f"node {name} killed: {len(killed)} processes (its kubelet, containerd, shims, kube-proxy and "
                f"containers) in {time.monotonic() - began:.2f}s, and its network is down; Kubernetes marks it "
                f"NotReady once node-monitor-grace-period ({sup.node.grace or 50}s) passes without its heartbeat")
    if phase != "killed":
        raise UserError(f"node {name} is {phase}; only a killed node is started (`cluster node kill {name}` first)")
    began = time.monotonic()
    real_node.restart(sup, name, float(asked.get("within") or 300))
    return f"node {name} started: Ready again after {time.monotonic() - began:.1f}s"
