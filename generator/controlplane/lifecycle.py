"""`cluster up`, `cluster status`, `cluster down`: start the supervisor in the background and wait
for it, report what runs, and stop everything it started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from generator.controlplane import build, network, processes
from generator.controlplane.layout import MARKER, Layout, started_by
from generator.errors import UserError


def running(layout: Layout) -> dict | None:
    state = layout.read_state()
    pid = state.get("pid")
    if pid and processes.pid_alive(pid) and state.get("phase") in ("starting", "ready", "degraded"):
        return state
    return None


def up(layout: Layout, values_file: str | None, timeout: float = 600, say=print, node: dict | None = None,
       operator: bool = True) -> dict:
    """`node`: cpu, memory (quantities) and gpus (a count) of the process kubelet's Node, and image:
    REPO=KNOWN aliases of images it runs."""
    state = running(layout)
    if state:
        if state["phase"] != "ready":
            raise UserError(f"a cluster in {layout.root} is {state['phase']}"
                            + (f" ({state['error']})" if state.get("error") else "")
                            + "; run `python -m generator cluster down` first")
        return state
    if values_file and not Path(values_file).is_file():
        raise UserError(f"-f {values_file}: no such file; give a values file for charts/pytorch-operator")
    if values_file:  # every value checked by the chart's schema before anything starts
        from generator.job import validation, values_io

        findings = validation.check_operator_values(values_io.load_mapping(values_file), "training-operator").findings
        if findings:
            raise UserError(findings, source=values_file)
    try:
        network.check()
    except network.NetworkError as exc:
        raise UserError(str(exc)) from None
    build.ensure(say)
    _leftovers(layout)
    layout.logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "generator.controlplane.supervisor", str(layout.root)]
    if values_file:
        argv += ["-f", str(Path(values_file).resolve())]
    if not operator:
        argv.append("--no-operator")
    node = dict(node or {})
    argv += [f"--image={alias}" for alias in node.pop("image", None) or []]
    argv += [f"--{k}={v}" for k, v in node.items() if v]
    with open(layout.supervisor_log, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=layout.root, env={**os.environ, MARKER: str(layout.root)})
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            state = layout.read_state()
            if state.get("pid") == proc.pid and state.get("phase") == "ready":
                return state
            if proc.poll() is not None or state.get("phase") == "failed":
                proc.wait(60)
                raise UserError(f"the cluster did not start: {state.get('error') or 'the supervisor exited'}; "
                                f"logs are in {layout.logs}")
            time.sleep(0.5)
    except KeyboardInterrupt:  # Ctrl-C on `up` leaves nothing half-started behind
        down(layout)
        raise
    down(layout)
    raise UserError(f"the cluster was not ready after {timeout:g}s and was stopped; logs are in {layout.logs}")


def _leftovers(layout: Layout) -> None:
    """A stopped cluster's data is kept apart from a fresh start: etcd's data would hold an
    earlier CA's secrets."""
    import shutil

    for sub in ("etcd", "kubeconfigs"):
        shutil.rmtree(layout.root / sub, ignore_errors=True)
    layout.state_file.unlink(missing_ok=True)


def strays(root: Path) -> list[int]:
    """Processes of the cluster in `root` that still run: each carries its folder in its environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and processes.pid_alive(int(entry.name)) \
                and started_by(int(entry.name), root):
            found.append(int(entry.name))
    return found


def status(layout: Layout) -> dict:
    state = layout.read_state()
    alive = running(layout) is not None
    report = {"dir": str(layout.root), "phase": state.get("phase", "absent") if alive else
              ("stopped" if state else "absent"), "server": state.get("server"), "kubeconfig": state.get("kubeconfig"),
              "error": state.get("error"), "processes": []}
    if alive:
        report["processes"].append({"name": "supervisor", "pid": state["pid"], "running": True,
                                    "log": str(layout.supervisor_log)})
    for name, info in (state.get("processes") or {}).items():
        report["processes"].append({"name": name, "pid": info["pid"], "running": alive and processes.pid_alive(info["pid"]),
                                    "log": info["log"]})
    return report


def down(layout: Layout, grace: float = 60) -> list[str]:
    """Stop the supervisor (which stops its children in order), then anything left behind."""
    state = layout.read_state()
    stopped = []
    pid = state.get("pid")
    if pid and processes.pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + grace
        while processes.pid_alive(pid) and time.monotonic() < end:
            time.sleep(0.2)
        stopped.append(f"supervisor (pid {pid})")
    for name, info in (state.get("processes") or {}).items():
        child = info["pid"]
        if processes.pid_alive(child) and started_by(child, layout.root):
            os.killpg(child, signal.SIGKILL)
            stopped.append(f"{name} (pid {child}, killed)")
    if pid and processes.pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    for stray in strays(layout.root):  # a pod's process whose kubelet died before it
        try:
            os.killpg(stray, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        stopped.append(f"pid {stray} (left behind, killed)")
    if state.get("pod_network"):  # the bridge and pods' namespaces of a supervisor that could not stop them
        pods = network.PodNetwork(**state["pod_network"])
        if pods.sandboxes() or Path(f"/sys/class/net/{pods.bridge}").exists():
            try:
                pods.delete()
                stopped.append(f"pod network {pods.bridge} (left behind, removed)")
            except network.NetworkError:
                pass
    if state:
        state["phase"] = "stopped"
        layout.write_state(state)
    return stopped
