"""`cluster up`, `cluster status`, `cluster down`: start the supervisor in the background and wait
for it, report what runs, and stop everything it started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from generator.controlplane import build, kueue_release, network, processes, state, trainer_release
from generator.controlplane.kubelet import cgroups
from generator.controlplane.layout import MARKER, Layout, started_by
from generator.controlplane.state import LIVE_PHASES, ClusterState, NodeOptions
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


def ours(pid: int, layout: Layout) -> bool:
    """Whether `pid` is a live process this cluster started: after a reboot or PID reuse, the number
    in state.json may belong to anybody's process, which must never be signalled."""
    return processes.pid_alive(pid) and started_by(pid, layout.root)


def _kill(pid: int, sig: int = signal.SIGKILL) -> str:
    """Signal the process, and its group when it leads one; '' when done, else why not."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return "it had already exited"
    except PermissionError as exc:
        return f"not allowed ({exc.strerror})"
    return ""


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
        same_images(layout, current, (node or NodeOptions()).images)
        return current
    if values_file and not Path(values_file).is_file():
        raise UserError(f"-f {values_file}: no such file; give a values file for charts/pytorch-operator")
    if values_file:  # every value checked by the chart's schema before anything starts
        from generator.job import validation, values_io

        findings = validation.check_operator_values(values_io.load_mapping(values_file), "training-operator").findings
        if findings:
            raise UserError(findings, source=values_file)
    real = node is not None and node.kind == "real"
    if real:
        from generator.controlplane.realnode import build as real_build
        from generator.controlplane.realnode import config as real_config

        try:
            real_config.check_sockets(real_config.Folders.of(layout))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    try:
        network.check()
    except network.NetworkError as exc:
        raise UserError(str(exc)) from None
    layout.create()  # first: only the user's own cluster folder has its leftovers removed
    build.ensure(say)
    from generator.controlplane import chart_images, registry

    # The registry's images, made once per machine like the binaries, and pushed: before the timeout.
    chart_images.seed(registry.start(say=say), say=say)
    if real:
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


# What `cluster down --purge` removes: every key, token, certificate and datum the cluster wrote,
# with the configuration it wrote for the API server and the releases (tests/e2e/test_readme_cluster.py
# purges a real cluster's folder and finds only the marker left).
PURGED = ("pki", "etcd", "kubeconfigs", "kubeconfig", "kubelet", "node", "volumes", "logs", "state.json",
          "admission.yaml", "helm", "operator-values.yaml", "trainer-values.yaml", "kueue-values.yaml")


def purge(layout: Layout) -> list[str]:
    """Remove the cluster's keys and data, only the entries it writes under its own folder; refused
    for a folder that is not this user's cluster folder, and while any of its processes runs."""
    import shutil

    layout.check_ours()
    if strays(layout.root):
        raise UserError(f"the cluster in {layout.root} still has processes running; run `python -m generator "
                        f"cluster down --dir {layout.root}` first")
    removed = []
    for name in PURGED:
        target = layout.root / name
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        else:
            continue
        removed.append(str(target))
    return removed


def strays(root: Path) -> list[int]:
    """Processes of the cluster in `root` that still run: each carries its folder in its environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and processes.pid_alive(int(entry.name)) \
                and started_by(int(entry.name), root):
            found.append(int(entry.name))
    return found


def status(layout: Layout) -> dict:
    current = state.load(layout.state_file)
    alive = running(layout) is not None
    report = {"dir": str(layout.root), "phase": current.phase if alive else ("stopped" if current else "absent"),
              "server": current and current.server, "kubeconfig": current and current.kubeconfig,
              "error": current and current.error, "processes": []}
    if alive:
        report["processes"].append({"name": "supervisor", "pid": current.pid, "running": True,
                                    "log": str(layout.supervisor_log)})
    # Which node runs the pods: the real one runs containerd beside its kubelet.
    started = current.processes if current else {}
    report["node_kind"] = ("real" if "containerd" in started else "process") if "kubelet" in started else None
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


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def down(layout: Layout, grace: float = 60, warn=_warn) -> list[str]:
    """Stop the supervisor (which stops its children in order), then anything left behind. What
    it returns was stopped; what could not be, or was not ours to stop, goes to `warn`."""
    try:
        current = state.load(layout.state_file)
    except state.StateError:
        return _down_without_state(layout, warn)
    stopped: list[str] = []
    killed: set[int] = set()  # what this run SIGKILLed: still listed, and marked, until the kernel has it exit
    pid = current.pid if current else None
    if pid and processes.pid_alive(pid) and not started_by(pid, layout.root):
        warn(f"pid {pid}, which {layout.state_file} names as the supervisor, is another process now (after a "
             "reboot or a reused process id): left alone")
        pid = None
    if pid and processes.pid_alive(pid):
        why = _kill(pid, signal.SIGTERM)
        end = time.monotonic() + grace
        while not why and processes.pid_alive(pid) and time.monotonic() < end:
            time.sleep(0.2)
        if why:
            warn(f"supervisor (pid {pid}) not signalled: {why}")
        else:
            stopped.append(f"supervisor (pid {pid})")
    for name, info in (current.processes if current else {}).items():
        if ours(info.pid, layout):
            _killed(f"{name} (pid {info.pid}", _kill(info.pid), stopped, warn, info.pid, killed)
    if pid and ours(pid, layout):
        _killed(f"supervisor (pid {pid}, after the grace period", _kill(pid), stopped, warn, pid, killed)
    stopped += _kill_strays(layout, warn, killed)
    stopped += _real_node_teardown(layout, warn)
    if current and current.pod_network:  # the bridge and pods' namespaces of a supervisor that could not stop them
        stopped += _remove_network(current.pod_network)
    if current:
        current.phase = "stopped"
        state.save(layout.state_file, current)
    return stopped


def _real_node_teardown(layout: Layout, warn=_warn) -> list[str]:
    """What a real node left on the machine (a supervisor killed before it could stop it)."""
    from generator.controlplane.realnode import config, host

    if not config.Folders.of(layout).root.is_dir():
        return []
    done, problems = host.teardown(layout.root)
    for problem in problems:
        warn(problem)
    return done


def _down_without_state(layout: Layout, warn=_warn) -> list[str]:
    """A state file this version cannot read: what the cluster started is still found by the marker
    in its environment, and its bridge by the folder's name; the file goes, as the error promised."""
    stopped = _kill_strays(layout, warn)
    stopped += _real_node_teardown(layout, warn)
    stopped += _remove_network(network.PodNetwork(network.bridge_name(layout.root), "0.0.0.0/32"))
    layout.state_file.unlink(missing_ok=True)
    return [*stopped, f"{layout.state_file} (unreadable, removed)"]


def _killed(what: str, why: str, stopped: list[str], warn, pid: int, killed: set[int]) -> None:
    if not why:
        stopped.append(f"{what}, killed)")
        killed.add(pid)
    elif why != "it had already exited":
        warn(f"{what}) not killed: {why}")


def _kill_strays(layout: Layout, warn=_warn, killed: set[int] | None = None) -> list[str]:
    """What is left of the cluster, but for what this run killed already: a killed process (or a
    member of a group killed whole) stays in /proc and its cgroup until it has exited, and is not
    left behind (under load that takes long enough for the sweep to meet it)."""
    stopped: list[str] = []
    killed = set() if killed is None else killed
    for stray in strays(layout.root):  # a pod's process whose kubelet died before it
        if stray not in killed and _group(stray) not in killed:
            _killed(f"pid {stray} (left behind", _kill(stray), stopped, warn, stray, killed)
    # A pod's process that dropped the marker from its env or left its session is still in its cgroup.
    stopped += [f"pid {pid} (a pod's, left behind, killed)" for pid in cgroups.kill_cluster(layout.root)
                if pid not in killed and _group(pid) not in killed]
    return stopped


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _remove_network(pods: network.PodNetwork) -> list[str]:
    if pods.sandboxes() or Path(f"/sys/class/net/{pods.bridge}").exists():
        try:
            pods.delete()
            return [f"pod network {pods.bridge} (left behind, removed)"]
        except network.NetworkError:
            pass
    return []
