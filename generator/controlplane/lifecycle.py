"""`cluster up` and `cluster status`: start the supervisor in the background and wait for it, and
report what runs (`cluster down`: teardown.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from generator.controlplane import build, kueue_release, network, processes, state, trainer_release
from generator.controlplane.layout import MARKER, Layout
from generator.controlplane.state import LIVE_PHASES, ClusterState, NodeOptions
from generator.controlplane.teardown import down, ours
from generator.errors import UserError


def running(layout: Layout) -> ClusterState | None:
    current = state.load(layout.state_file)
    if current and current.pid and ours(current.pid, layout) and current.phase in LIVE_PHASES:
        return current
    return None


def same_images(layout: Layout, current: ClusterState, asked: dict[str, str]) -> None:
    """`cluster up --image` on a cluster that runs already: its node keeps the map it started with,
    so a mapping it lacks is refused rather than ignored (pods would stay in ImagePullBackOff). The
    node step keeps that map in the state as it starts the node; a state without it knows of no
    mapping missing."""
    known = current.node_options.images if current.node_options else None
    missing = {k: v for k, v in asked.items() if known is not None and known.get(k) != v}
    if missing:
        listing = ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
        raise UserError(f"a cluster runs in {layout.root} already, and its node was started without --image {listing}; "
                        "a node's images are fixed when it starts: run `python -m generator cluster down`, then "
                        "`cluster up` with every --image it needs")


def node_kind(current: ClusterState | None) -> str | None:
    """Which node a cluster runs: the kind it was started with, else (a state that has not kept its
    node options) the one its processes show, the real one running containerd beside its kubelet;
    None before its node starts."""
    if current is None:
        return None
    if current.node_options:
        return current.node_options.kind
    return ("real" if "containerd" in current.processes else "process") if "kubelet" in current.processes else None


def choose_node(asked: str | None, running: str | None = None, where: Path | None = None,
                process_only: str | None = None, cannot=lambda install: None) -> tuple[str, str | None]:
    """The node `cluster up` starts (or `cluster build` builds), and the line it says about it (None
    when --node named it). `asked` is --node's value (None: not given); `running` the kind of the
    cluster running in `where`, which keeps its node; `process_only` why the options given need the
    process node; `cannot(install)` why the real node cannot run here (None when it can), installing
    the packages it lacks when `install` and the real node's start would install them anyway."""
    if running:
        if asked and asked != running:
            raise UserError(f"the cluster in {where} runs the {running} node; run `python -m generator cluster down "
                            f"--dir {where}` first for the {asked} node")
        if running == "real" and process_only:
            raise UserError(f"{process_only}, and the cluster in {where} runs the real node; run `python -m generator "
                            f"cluster down --dir {where}` first for the process node")
        return running, None if asked else f"node: {running} (the node of the cluster running in {where})"
    if asked == "process":
        return "process", None
    if asked == "real":
        reason = cannot(False)
        if reason:
            raise UserError(f"--node real: {reason}, or use `--node process`")
        return "real", None
    reason = process_only or cannot(True)
    if reason:
        return "process", f"node: process ({reason}; --node process chooses it without this line)"
    from generator.controlplane.realnode import support

    return "real", f"node: real ({support.RUNS}; --node process runs pods as processes of this machine)"


def real_node_cannot(layout: Layout | None, install: bool, say=print) -> str | None:
    """Why the real node cannot run on this machine (for the cluster in `layout`, whose folder must
    hold its sockets), with what to change; None when it can. With `install`, runc, iptables and
    the CNI plugins are installed here when missing, as the node's start would, and a failed install is the
    reason."""
    from generator.controlplane.realnode import build as real_build
    from generator.controlplane.realnode import config as real_config
    from generator.controlplane.realnode import support

    machine = support.Machine.read()
    reason = support.why_not(machine)
    if reason is None and layout is not None:
        try:
            real_config.check_sockets(real_config.Folders.of(layout))
        except ValueError as exc:
            reason = str(exc)
    if reason is None and install and support.installs_packages(machine):
        try:
            real_build.host_packages(say)
        except UserError as exc:
            failed = str(exc).splitlines()[0].rstrip(":")
            reason = (f"the real node needs runc, iptables and the CNI plugins, and installing them failed ({failed}): install "
                      f"{' and '.join(real_build.PACKAGES)} yourself")
    return reason


def _publish(images: dict[str, str], say):
    """The registry's images, made once per machine like the binaries, and pushed with the real
    node's `--image` ones: before the timeout. The registry, started."""
    from generator.controlplane import chart_images, registry, user_images

    reg = registry.start(say=say)
    user_images.publish(reg, images, chart_images.seed(reg, say=say), say)
    return reg


def _check_held(reg, values_file: str, values: dict) -> None:
    """On the real node, the operator's images as the user's values name them must be in the registry."""
    from generator.controlplane import chart_images

    lacking = chart_images.not_held(reg, values)
    if lacking:
        image = lacking[0]
        raise UserError(f"-f {values_file}: the real node pulls {image} from the registry on this machine, which does "
                        f"not hold it, so the operator would never start; put it there first: `python -m generator "
                        f"image load {image}` (from podman's store or an archive), or `python -m generator image load "
                        f"IMAGE --as {image}` for your mirror of an image it holds; or use `--node process`")


def up(layout: Layout, values_file: str | None, timeout: float = 600, say=print, node: NodeOptions | None = None,
       operator: bool = True, trainer: bool = False, kueue: bool = False, kueue_quota: str | None = None) -> ClusterState:
    current = running(layout)
    if current:
        if current.phase != "ready":
            raise UserError(f"a cluster in {layout.root} is {current.phase}"
                            + (f" ({current.error})" if current.error else "")
                            + "; run `python -m generator cluster down` first")
        if trainer and not current.trainer:
            raise UserError(f"the cluster in {layout.root} runs without Kubeflow Trainer; run `python -m generator "
                            "cluster down`, then `cluster up --trainer`")
        if kueue and not current.kueue:
            raise UserError(f"the cluster in {layout.root} runs without Kueue; run `python -m generator cluster down`, "
                            "then `cluster up --kueue`")
        if current.node_options and current.node_options.kind == "real":
            if node and node.images:
                _publish(node.images, say)  # pulled anew: the node's map is the registry
        else:
            same_images(layout, current, (node or NodeOptions()).images)
        return current
    if values_file and not Path(values_file).is_file():
        raise UserError(f"-f {values_file}: no such file; give a values file for charts/pytorch-operator")
    operator_values = None
    if values_file:  # every value checked by the chart's schema before anything starts
        from generator.job import validation, values_io

        operator_values = values_io.load_mapping(values_file)
        findings = validation.check_operator_values(operator_values, "training-operator").findings
        if findings:
            raise UserError(findings, source=values_file)
    real = node is not None and node.kind == "real"  # what it needs of the machine: choose_node said
    try:
        network.check()
    except network.NetworkError as exc:
        raise UserError(str(exc)) from None
    layout.create()  # first: only the user's own cluster folder has its leftovers removed
    build.ensure(say)
    reg = _publish(node.images if real else {}, say)  # the process node runs no image: its map stays its own
    if real and operator and operator_values is not None:
        _check_held(reg, values_file, operator_values)
    if real:  # room for what the node will unpack, before anything starts
        from generator.controlplane import disk, user_images

        disk.check(layout.root, reg, disk.pulled(operator_values, operator, [user_images.tagged(r) for r in node.images]))
    if real:
        from generator.controlplane.realnode import build as real_build

        real_build.ensure(say)
    _leftovers(layout)
    reused = _old_ca(layout)
    if reused:
        say(reused)
    layout.logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "generator.controlplane.supervisor", str(layout.root)]
    if values_file:
        argv += ["-f", str(Path(values_file).resolve())]
    if not operator:
        argv.append("--no-operator")
    if trainer:
        trainer_release.stage(layout.root / "helm" / "charts")  # its charts found before anything starts
        argv.append("--trainer")
    if kueue:
        kueue_release.checked_chart()  # its chart found before anything starts
        argv += ["--kueue"] + ([f"--kueue-quota={kueue_quota}"] if kueue_quota else [])
    argv.append(f"--node={(node or NodeOptions()).encode()}")
    with open(layout.supervisor_log, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=layout.root, env={**os.environ, MARKER: str(layout.root)})
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
              "error": current and current.error, "processes": []}
    if alive:
        report["processes"].append({"name": "supervisor", "pid": current.pid, "running": True,
                                    "log": str(layout.supervisor_log)})
    report["node_kind"] = node_kind(current)
    for name, info in (current.processes if current else {}).items():
        report["processes"].append({"name": name, "pid": info.pid, "running": alive and processes.pid_alive(info.pid),
                                    "log": info.log})
    report["pods"] = _release_pods(layout, current) if alive else []
    return report


def _release_pods(layout: Layout, current: ClusterState) -> list[dict]:
    """The pods of the releases `cluster up` installed (the operator's, Trainer's and JobSet's), as
    the API server lists them; none when it cannot be asked."""
    from kubernetes import client

    from generator.controlplane import operator

    releases = [r for r in (current.operator, current.trainer, current.kueue) if r]
    if not releases:
        return []
    try:
        core = client.CoreV1Api(operator.admin_client(layout))
        listed = [(r, core.list_namespaced_pod(r.namespace, label_selector=f"app.kubernetes.io/instance={r.release}",
                                               _request_timeout=10).items) for r in releases]
    except Exception:  # a cluster coming up or going down: the processes above say what runs
        return []
    return [{"release": r.release, "namespace": pod.metadata.namespace, "name": pod.metadata.name,
             "phase": pod.status.phase,
             "ready": any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])}
            for r, pods in listed for pod in sorted(pods, key=lambda p: p.metadata.name)]


