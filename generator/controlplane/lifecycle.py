"""`cluster up` and `cluster status`: start the supervisor in the background and wait for it, and
report what runs (`cluster down`: teardown.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from generator.controlplane import build, network, processes, state
from generator.controlplane.layout import MARKER, Layout
from generator.controlplane.releases import kueue, trainer
from generator.controlplane.state import LIVE_PHASES, ClusterState, NodeOptions
from generator.controlplane.teardown import down, ours
from generator.errors import UserError


@dataclass(frozen=True)
class Releases:
    """What `cluster up` installs on the node: the operator chart (with its values file, if any),
    Kubeflow Trainer, Kueue and the size of Kueue's ClusterQueue."""
    operator: bool = True
    values_file: str | None = None
    trainer: bool = False
    kueue: bool = False
    kueue_quota: str | None = None


def running(layout: Layout) -> ClusterState | None:
    current = state.load(layout.state_file)
    if current and current.pid and ours(current.pid, layout) and current.phase in LIVE_PHASES:
        return current
    return None


def check_machine(layout: Layout | None, say=print) -> None:
    """Refused, naming what is missing and how to get it, where the node cannot run on this machine
    (for the cluster in `layout`, whose folder holds its sockets). runc, iptables and the CNI
    plugins are installed here when missing, as root with apt-get; a failed install is the reason."""
    from generator.controlplane.realnode import config as real_config
    from generator.controlplane.realnode import packaged, support

    machine = support.Machine.read()
    reason = support.why_not(machine)
    if reason is None and layout is not None:
        try:
            real_config.check_sockets(real_config.Folders.of(layout))
        except ValueError as exc:
            reason = str(exc)
    if reason is None and support.installs_packages(machine):
        try:
            packaged.install(say)
        except UserError as exc:
            failed = str(exc).splitlines()[0].rstrip(":")
            reason = (f"the node needs runc, iptables and the CNI plugins, and installing them failed ({failed}): "
                      f"install {' and '.join(packaged.PACKAGES)} yourself")
    if reason:
        raise UserError(f"the local cluster's node ({support.RUNS}) cannot run here: {reason}")


def _publish(images: dict[str, str], say):
    """The registry's images, made once per machine like the binaries, and pushed with the node's
    `--image` ones: before the timeout. The registry, started."""
    from generator.controlplane import chart_images, registry, user_images

    reg = registry.start(say=say)
    user_images.publish(reg, images, chart_images.seed(reg, say=say), say)
    return reg


def _check_held(reg, values_file: str, values: dict) -> None:
    """The operator's images as the user's values name them must be in the registry the node pulls from."""
    from generator.controlplane import chart_images

    lacking = chart_images.not_held(reg, values)
    if lacking:
        image = lacking[0]
        raise UserError(f"-f {values_file}: the node pulls {image} from the registry on this machine, which does "
                        f"not hold it, so the operator would never start; put it there first: `python -m generator "
                        f"image load {image}` (from podman's store or an archive), or `python -m generator image load "
                        f"IMAGE --as {image}` for your mirror of an image it holds")


def _again(layout: Layout, current: ClusterState, node: NodeOptions, releases: Releases, say) -> ClusterState:
    """`cluster up` on a cluster that runs: what it lacks is refused with the way to get it; new
    `--image` folders are pushed (the node pulls them anew)."""
    if current.phase != "ready":
        raise UserError(f"a cluster in {layout.root} is {current.phase}"
                        + (f" ({current.error})" if current.error else "")
                        + "; run `python -m generator cluster down` first")
    for asked, there, flag, what in ((releases.trainer, current.trainer, "--trainer", "Kubeflow Trainer"),
                                     (releases.kueue, current.kueue, "--kueue", "Kueue")):
        if asked and not there:
            raise UserError(f"the cluster in {layout.root} runs without {what}; run `python -m generator "
                            f"cluster down`, then `cluster up {flag}`")
    started = current.node_options
    if started is not None:
        shown = lambda value: "unset" if value is None else value  # noqa: E731
        changed = [f"{flag} {shown(asked)} (it runs with {shown(had)})" for flag, asked, had in (
            ("--cpu", node.cpu, started.cpu), ("--memory", node.memory, started.memory),
            ("--gpus", node.gpus, started.gpus), ("--pod-security", node.pod_security, started.pod_security),
            ("--nodes", node.count, started.count), ("--node-grace-period", node.grace, started.grace))
            if asked != had]
        if changed:
            raise UserError(f"the cluster in {layout.root} runs already, and its node was started otherwise: "
                            f"{'; '.join(changed)}; run `python -m generator cluster down --dir {layout.root}`, then "
                            "`cluster up` with the node's options")
    if node.images:
        _publish(node.images, say)
    return current


def _operator_values(values_file: str | None) -> dict | None:
    """The operator's values, every one checked by the chart's schema before anything starts."""
    if not values_file:
        return None
    if not Path(values_file).is_file():
        raise UserError(f"-f {values_file}: no such file; give a values file for charts/pytorch-operator")
    from generator.controlplane.releases import operator
    from generator.job import validation, values_io

    values = values_io.load_mapping(values_file)
    findings = validation.check_operator_values(values, operator.NAME).findings
    if findings:
        raise UserError(findings, source=values_file)
    return values


# Of `cluster up --timeout`, what the supervisor leaves itself to report a wait that ran out, before
# `cluster up` gives up on it: the user reads which wait it was.
REPORT_SECONDS = 5.0


def _supervisor_argv(layout: Layout, node: NodeOptions, releases: Releases, timeout: float) -> list[str]:
    within = max(timeout - REPORT_SECONDS, 1.0)  # every step's wait ends by then (Supervisor.left())
    argv = [sys.executable, "-m", "generator.controlplane.supervisor", str(layout.root), f"--within={within:g}"]
    if releases.values_file:
        argv += ["-f", str(Path(releases.values_file).resolve())]
    if not releases.operator:
        argv.append("--no-operator")
    if releases.trainer:
        trainer.stage(layout.root / "helm" / "charts")  # its charts found before anything starts
        argv.append("--trainer")
    if releases.kueue:
        kueue.checked_chart()  # its chart found before anything starts
        argv += ["--kueue"] + ([f"--kueue-quota={releases.kueue_quota}"] if releases.kueue_quota else [])
    return [*argv, f"--node={node.encode()}"]


def up(layout: Layout, releases: Releases = Releases(), timeout: float = 600, say=print,
       node: NodeOptions | None = None) -> ClusterState:
    node = node or NodeOptions()
    layout.check_owned()  # before its state is read: another user's could name their own kubeconfig
    current = running(layout)
    if current:
        return _again(layout, current, node, releases, say)
    values_file = releases.values_file
    operator_values = _operator_values(values_file)
    try:
        network.check()
    except network.NetworkError as exc:
        raise UserError(str(exc)) from None
    layout.create()  # first: only the user's own cluster folder has its leftovers removed
    build.ensure(say)
    reg = _publish(node.images, say)
    if releases.operator and operator_values is not None:
        _check_held(reg, values_file, operator_values)
    # Room for what the node will unpack, before anything starts.
    from generator.controlplane import disk, user_images

    disk.check(layout.root, reg, disk.pulled(operator_values, releases.operator,
                                             [user_images.tagged(r) for r in node.images]))
    build.ensure(say, build.part(node=True))
    _leftovers(layout)
    reused = _old_ca(layout)
    if reused:
        say(reused)
    layout.logs.mkdir(parents=True, exist_ok=True)
    argv = _supervisor_argv(layout, node, releases, timeout)
    with open(layout.supervisor_log, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=layout.root, env={**os.environ, MARKER: str(layout.root)})
    return _wait_ready(layout, proc, timeout)


def _wait_ready(layout: Layout, proc: subprocess.Popen, timeout: float) -> ClusterState:
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            current = state.load(layout.state_file) or ClusterState(pid=None)
            if current.pid == proc.pid and current.phase == "ready":
                return current
            if proc.poll() is not None or current.phase == "failed":
                proc.wait(60)
                raise UserError(f"the cluster did not start: {current.error or 'the supervisor exited'}; "
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


def _old_ca(layout: Layout) -> str:
    """A stopped cluster's CA signs the next one's certificates: say so, with the way out."""
    import datetime

    ca = layout.pki / "ca.crt"
    if not ca.is_file():
        return ""
    from cryptography import x509

    from generator.controlplane import pki

    made = datetime.datetime.fromtimestamp(ca.stat().st_mtime, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if not pki.lasting(x509.load_pem_x509_certificate(ca.read_bytes())):
        return f"the cluster's CA of {made} in {layout.pki} ends within {pki.RENEW_BEFORE.days} days: making a new one"
    return (f"reusing the cluster's CA of {made} and the keys in {layout.pki} "
            f"(`python -m generator cluster down --purge --dir {layout.root}` removes them)")


def status(layout: Layout) -> dict:
    current = state.load(layout.state_file)
    alive = running(layout) is not None
    report = {"dir": str(layout.root), "phase": current.phase if alive else ("stopped" if current else "absent"),
              "server": current and current.server, "kubeconfig": current and current.kubeconfig,
              "error": current and current.error, "node": current.node if alive else None, "processes": []}
    if alive:
        report["processes"].append({"name": "supervisor", "pid": current.pid, "running": True,
                                    "log": str(layout.supervisor_log)})
    for name, info in (current.processes if current else {}).items():
        report["processes"].append({"name": name, "pid": info.pid, "running": alive and processes.pid_alive(info.pid),
                                    "log": info.log})
    report["nodes"] = nodes(layout, current) if alive else []
    report["pods"] = _release_pods(layout, current) if alive else []
    return report


def nodes(layout: Layout, current: ClusterState) -> list[dict]:
    """Each node as its supervisor runs it (phase, since when, its processes' pids while they run)
    and as the API server sees it (`condition`: the Node's Ready condition, True, False or Unknown;
    None when it cannot be asked or the Node is gone)."""
    seen = _node_conditions(layout)
    out = []
    for name, node in current.nodes.items():
        own = {key.split("@", 1)[0]: info.pid for key, info in current.processes.items()
               if key.endswith(f"@{name}") and node.phase != "killed"}
        out.append({"name": name, "phase": node.phase, "since": node.since, "ready": seen.get(name) == "True",
                    "condition": seen.get(name), "processes": own})
    return out


def _node_conditions(layout: Layout) -> dict[str, str]:
    """Each Node's Ready status as the API server has it (True, False, Unknown)."""
    from kubernetes import client

    from generator.controlplane.admin import admin_client

    try:
        listed = client.CoreV1Api(admin_client(layout)).list_node(_request_timeout=10).items
    except Exception:  # a cluster coming up or going down: the supervisor's phases say what runs
        return {}
    return {n.metadata.name: next((c.status for c in n.status.conditions or [] if c.type == "Ready"), "Unknown")
            for n in listed}


def _release_pods(layout: Layout, current: ClusterState) -> list[dict]:
    """The pods of the releases `cluster up` installed (the operator's, Trainer's and JobSet's), as
    the API server lists them; none when it cannot be asked."""
    from kubernetes import client

    from generator.controlplane.admin import admin_client, holds

    releases = [r for r in (current.operator, current.trainer, current.kueue) if r]
    if not releases:
        return []
    try:
        core = client.CoreV1Api(admin_client(layout))
        listed = [(r, core.list_namespaced_pod(r.namespace, label_selector=f"app.kubernetes.io/instance={r.release}",
                                               _request_timeout=10).items) for r in releases]
    except Exception:  # a cluster coming up or going down: the processes above say what runs
        return []
    return [{"release": r.release, "namespace": pod.metadata.namespace, "name": pod.metadata.name,
             "phase": pod.status.phase,
             "ready": holds(pod, "Ready")}
            for r, pods in listed for pod in sorted(pods, key=lambda p: p.metadata.name)]


