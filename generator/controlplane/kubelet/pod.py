"""One pod on the process node, from its binding to its deletion: volumes, init containers in
order, then its containers, restarts by restartPolicy with the kubelet's back-off, probes, and
the pod's status written back to the API server after every change."""
from __future__ import annotations

import datetime
import os
import shutil
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from generator.container import programs
from generator.container.env import ConfigError, Sources, container_env
from generator.container.process import BACKOFF_START, Process, backoff, stop_together
from generator.controlplane import network
from generator.controlplane.kubelet import cgroups, runtime, security
from generator.controlplane.kubelet.volumes import MountError, Volumes

REFRESH_SECONDS = 2.0  # Secret, ConfigMap and token volumes follow the API this often
DEFAULT_GRACE = 30
NODE_ERROR = "NodeError"  # the pod's reason when this node failed on a bug running it
UNHONOURED = "SecurityContextNotApplied"  # the event naming what of a container's securityContext or limits is not applied
SHUTDOWN_GRACE = 5.0  # each container's grace when the node itself stops


def transient() -> tuple[type[BaseException], ...]:
    """What a step meets when the API server is away or restarting: worth trying again."""
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError

    return ApiException, HTTPError, OSError


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Probe:
    spec: dict
    due: float = 0.0
    successes: int = 0
    failures: int = 0
    ok: bool = False


@dataclass
class Container:
    spec: dict
    init: bool
    restarts: int = 0
    proc: Process | None = None
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last: dict = field(default_factory=dict)
    next_start: float = 0.0
    since: float = 0.0  # when its current run started, on the worker's clock
    delay: float = 0.0
    done: bool = False  # exited and will not start again
    image_ok: bool = False
    readiness: Probe | None = None
    liveness: Probe | None = None
    killed_for: str = ""
    log: object = None
    cgroup: cgroups.Container | None = None
    identity: security.Identity | None = None  # who its current run runs as (exec probes run so too)

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def running(self) -> bool:
        return self.proc is not None and "running" in self.state

    @property
    def ready(self) -> bool:
        return self.running and (self.readiness is None or self.readiness.ok)

    def status(self) -> dict:
        out = {"name": self.name, "image": self.spec.get("image", ""), "imageID": "", "ready": self.ready,
               "restartCount": self.restarts, "state": self.state, "lastState": self.last,
               "started": self.running}
        if self.image_ok:
            out["imageID"] = f"process://{programs.repository(self.spec.get('image', ''))}"
        if self.proc is not None:
            out["containerID"] = f"process://{self.proc.pid}"
        return out


class PodWorker(threading.Thread):
    """Runs one pod. `update()` hands it each newer copy of the pod from the watch."""

    # What back-off, probes and refreshes are timed by; a test gives a worker a clock of its own.
    clock = staticmethod(time.monotonic)

    def __init__(self, kubelet, pod: dict):
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}-{meta['name']}", daemon=True)
        self.kubelet, self.pod = kubelet, pod
        self.uid, self.namespace, self.pod_name = meta["uid"], meta["namespace"], meta["name"]
        self.folder: Path = kubelet.root / "pods" / f"{self.namespace}_{self.pod_name}_{self.uid}"
        self.lock = threading.Lock()
        self.gone = False  # removed from the API without a graceful deletion
        self.stopping = threading.Event()
        self.volumes = Volumes(kubelet.core, pod, self.folder, kubelet.layout.volumes)
        self.sandbox = False  # its network namespace exists and its volumes are set up
        self.netns: Path | None = None
        self.pod_ip = ""
        self.started_at = now()
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.broken = False  # a bug stopped this worker driving the pod; it only reports and awaits deletion
        self.init = [Container(c, True) for c in pod["spec"].get("initContainers") or []]
        self.main = [Container(c, False) for c in pod["spec"]["containers"]]
        for c in self.main:
            c.readiness = Probe(c.spec["readinessProbe"]) if c.spec.get("readinessProbe") else None
            c.liveness = Probe(c.spec["livenessProbe"]) if c.spec.get("livenessProbe") else None
        self.conditions: dict[str, dict] = {}
        self.reported: dict | None = None
        self.refreshed = 0.0
        self.finished = threading.Event()

    # --- from the watch ------------------------------------------------------------------
    def update(self, pod: dict) -> None:
        with self.lock:
            self.pod = pod
            self.volumes.pod = pod

    def known(self) -> dict:
        """The pod with what this kubelet knows before the API server does (its IPs), for the downward API."""
        host = [{"ip": self.kubelet.node_ip}]
        status = {**(self.pod.get("status") or {}), "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
                  "hostIP": self.kubelet.node_ip, "hostIPs": host}
        return {**self.pod, "status": status}

    def containers(self) -> list[Container]:
        return [*self.init, *self.main]

    def find(self, name: str) -> Container | None:
        return next((c for c in self.containers() if c.name == name), None)

    def log_path(self, container: Container | str, restart: int) -> Path:
        name = container if isinstance(container, str) else container.name
        return self.folder / "logs" / name / f"{restart}.log"

    def writing(self, c: Container, path: Path) -> bool:
        """Whether `path` is the log of a run of `c` that still goes on."""
        return c.running and self.log_path(c, c.restarts) == path

    @property
    def hostname(self) -> str:
        """As Kubernetes names a pod's host: spec.hostname, else the pod's name cut to 63 characters."""
        return self.pod["spec"].get("hostname") or self.pod_name[:63].rstrip("-.")

    @property
    def ready(self) -> bool:
        return self.phase == "Running" and all(c.ready for c in self.main)

    @property
    def restart_policy(self) -> str:
        return self.pod["spec"].get("restartPolicy") or "Always"

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                with self.lock:
                    pod = self.pod
                if self.gone or pod["metadata"].get("deletionTimestamp"):
                    try:
                        self._terminate(pod)
                    except Exception as exc:  # the watch hands the deletion over again after a relist
                        self.kubelet.log(f"pod {self.namespace}/{self.pod_name}: deletion failed: {exc!r}")
                    return
                if not self.broken:
                    try:
                        self._step()
                    except transient() as exc:  # the API server restarting: the next step tries again
                        self.kubelet.log(f"pod {self.namespace}/{self.pod_name}: {exc!r}")
                    except Exception as exc:  # noqa: BLE001 (a bug: told once, then this pod is left alone)
                        self._broke(exc)
                self._report()
                self.stopping.wait(0.2)
        finally:
            self._kill_all(SHUTDOWN_GRACE)
            self._remove_sandbox()
            self.finished.set()

    def _broke(self, exc: Exception) -> None:
        """A programming error in this node: retrying would repeat it every step for ever. The
        pod fails with a reason its owner's controller and `generator diagnose` see, its
        containers stop, and the node's log has the traceback once."""
        import traceback

        self.broken = True
        where = traceback.extract_tb(exc.__traceback__)[-1]
        self.kubelet.log(f"pod {self.namespace}/{self.pod_name}: the process node failed on a bug and stops running "
                         f"this pod:\n{''.join(traceback.format_exception(exc)).rstrip()}")
        self.phase, self.reason = "Failed", NODE_ERROR
        self.message = (f"the process node failed running this pod ({type(exc).__name__}: {exc} at "
                        f"{Path(where.filename).name}:{where.lineno}); its log has the traceback; delete the pod "
                        "to run it again, and report the bug")
        self.kubelet.event(self.pod, "Warning", NODE_ERROR, self.message)
        try:
            self._kill_all(self._grace())
        except Exception as again:  # noqa: BLE001 (the pod is failed already; the loop's end kills what is left)
            self.kubelet.log(f"pod {self.namespace}/{self.pod_name}: stopping its containers failed too: {again!r}")

    def _step(self) -> None:
        if self.phase in ("Succeeded", "Failed"):
            self._remove_sandbox()  # a finished pod keeps its IP in its status, but no longer holds it
            return
        if not self.sandbox:
            try:
                self.volumes.setup()
            except (MountError, ConfigError) as exc:
                self.kubelet.event(self.pod, "Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}")
                self.stopping.wait(2)
                return
            try:
                self.pod_ip = self.kubelet.addresses.take(self.uid)
                self.netns = self.kubelet.network.add_sandbox(self.uid, self.pod_ip)
            except network.NetworkError as exc:
                self.kubelet.event(self.pod, "Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc}")
                self.stopping.wait(2)
                return
            self.sandbox, self.refreshed = True, self.clock()
        elif self.clock() - self.refreshed > REFRESH_SECONDS:
            self.volumes.refresh()
            self.refreshed = self.clock()
        for c in self.init:
            if c.done and c.state.get("terminated", {}).get("exitCode") == 0:
                continue
            self._drive(c)
            return
        for c in self.main:
            self._drive(c)
            if c.running:
                self._probe(c)
        if all(c.done for c in self.main):
            failed = [c for c in self.main if c.state.get("terminated", {}).get("exitCode") != 0]
            self.phase = "Failed" if failed else "Succeeded"
        elif any(c.proc is not None for c in self.main):
            self.phase = "Running"

    def _drive(self, c: Container) -> None:
        """Start, watch and restart one container."""
        if c.done:
            return
        if c.running:
            code = c.proc.poll()
            if code is None:
                return
            self._exited(c, code)
        if c.done or self.clock() < c.next_start:
            return
        self._start(c)

    def _exited(self, c: Container, code: int) -> None:
        c.proc.reap()
        if c.cgroup:
            c.cgroup.kill()  # what left its process group (setsid, a double fork) goes with it
        ran = self.clock() - c.since
        self._terminated(c, code)
        policy = self.restart_policy
        restart = (code != 0 and policy != "Never") if c.init else (policy == "Always" or (policy == "OnFailure" and code != 0))
        if c.init and code != 0 and policy == "Never":
            self.phase, self.reason = "Failed", ""
            for other in self.main:
                other.done = True
        if not restart:
            c.done = True
            return
        # The first restart comes at once; each crash after it waits twice as long, up to five minutes.
        c.delay = backoff(c.delay, c.restarts, ran)
        c.next_start = self.clock() + c.delay
        if c.delay:
            c.last, c.state = c.state, {"waiting": {"reason": "CrashLoopBackOff", "message":
                                                    f"back-off {c.delay:g}s restarting failed container={c.name} "
                                                    f"pod={self.pod_name}_{self.namespace}({self.uid})"}}
            self.kubelet.event(self.pod, "Warning", "BackOff", f"Back-off restarting failed container {c.name} in pod "
                                                               f"{self.pod_name}_{self.namespace}({self.uid})")

    @property
    def workdir(self) -> Path:
        return self.folder / "workdir"

    def resolve(self, c: Container, program: programs.Program) -> tuple[dict[str, str], dict[str, str]]:
        """The container's env as this node resolves it, and what of it the node itself gave
        (the image's ENV and the node's variables: paths of this machine, never mapped)."""
        given = self.kubelet.base_env(program, self)
        env = container_env(self.known(), c.spec, given, Sources(self.kubelet.core, self.namespace), self.kubelet.allocatable)
        return env, given

    def prepare(self, c: Container, program: programs.Program) -> runtime.Prepared:
        """The container as `_start` would start it, without starting it."""
        env, given = self.resolve(c, program)
        return runtime.prepare(program, c.spec, env, self.volumes.paths, self.workdir, given)

    def _start(self, c: Container) -> None:
        restarting = c.proc is not None
        try:
            program = programs.resolve(c.spec.get("image", ""), self.kubelet.aliases, runtime.binaries(),
                                       runtime.upstream())
        except programs.ImagePullError as exc:
            first = c.state.get("waiting", {}).get("reason") not in ("ErrImagePull", "ImagePullBackOff")
            c.state = {"waiting": {"reason": "ErrImagePull" if first else "ImagePullBackOff", "message": str(exc)}}
            if first:
                self.kubelet.event(self.pod, "Warning", "Failed", f'Failed to pull image "{c.spec.get("image")}": {exc}')
                self.kubelet.event(self.pod, "Warning", "Failed", "Error: ErrImagePull")
            c.next_start = self.clock() + BACKOFF_START
            return
        if not c.image_ok:
            c.image_ok = True
            self.kubelet.event(self.pod, "Normal", "Pulled",
                               f'Container image "{c.spec.get("image")}" already present on machine ({program.what})')
        try:
            env, given = self.resolve(c, program)
        except ConfigError as exc:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.kubelet.event(self.pod, "Warning", "Failed", f"Error: {exc}")
            c.next_start = self.clock() + REFRESH_SECONDS
            return
        try:
            identity = security.identity(self.pod["spec"], c.spec, program, f"{self.pod_name}_{self.namespace}({self.uid})")
        except (security.NonRootError, security.CapabilityError) as exc:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self.kubelet.event(self.pod, "Warning", "Failed", f"Error: {exc}")
            c.next_start = self.clock() + REFRESH_SECONDS
            return
        c.identity = identity
        ignored = security.unhonoured(self.pod["spec"], c.spec)
        missing = self._sandbox_container(c, identity)
        if ignored or missing:
            self.kubelet.event(self.pod, "Warning", UNHONOURED, f"container {c.name}: this process node does not apply "
                               f"{', '.join(ignored + missing)}; the rest of its securityContext and limits apply")
        if restarting:
            c.restarts += 1
            c.last = c.state if "terminated" in c.state else c.last
        path = self.log_path(c, c.restarts)
        path.parent.mkdir(parents=True, exist_ok=True)
        log = open(path, "a", buffering=1, encoding="utf-8")

        def line(text: str) -> None:
            log.write(f"{stamp()} stdout F {text}\n")

        try:
            c.proc = runtime.start(program, c.spec, env, self.volumes.paths, self.hostname, self.kubelet.hosts_file(self),
                                   self.workdir, self.kubelet.toolbox, self.netns, line, given, identity,
                                   self._hidden(identity), c.cgroup.join if c.cgroup else None)
        except runtime.StartError as exc:
            log.close()
            c.state = {"waiting": {"reason": "RunContainerError", "message": str(exc)}}
            self.kubelet.event(self.pod, "Warning", "Failed", f"Error: {exc}")
            c.next_start = self.clock() + BACKOFF_START
            return
        c.log, c.since = log, self.clock()
        c.state = {"running": {"startedAt": now()}}
        for probe in (c.readiness, c.liveness):
            if probe:
                probe.due = self.clock() + probe.spec.get("initialDelaySeconds", 0)
                probe.ok, probe.successes, probe.failures = False, 0, 0
        self.kubelet.event(self.pod, "Normal", "Created", f"Created container: {c.name}")
        self.kubelet.event(self.pod, "Normal", "Started", f"Started container {c.name}")

    def _sandbox_container(self, c: Container, identity: security.Identity | None) -> list[str]:
        """The container's cgroups with its limits (anything its last run left there killed), and its
        own folders owned by its user; what of its limits this machine cannot apply."""
        from kubernetes.utils import parse_quantity

        if c.cgroup is None:
            c.cgroup = cgroups.Container(self.kubelet.cgroups, self.kubelet.cgroup_cluster, self.uid, c.name)
        c.cgroup.kill()
        limits = (c.spec.get("resources") or {}).get("limits") or {}
        memory = int(parse_quantity(limits["memory"])) if limits.get("memory") else None
        cpu = int(parse_quantity(limits["cpu"]) * 1000) if limits.get("cpu") else None
        missing = c.cgroup.create(memory, cpu)
        if identity is not None and identity.uid != 0:
            # The container's own disk (its home, working folder and default output) is its user's.
            for folder in (self.folder / "home", self.workdir, self.folder / "output"):
                folder.mkdir(parents=True, exist_ok=True)
                os.chown(folder, identity.uid, identity.gid)
        return missing

    def _hidden(self, identity: security.Identity | None) -> runtime.Hidden:
        """Inside the container, the cluster's folder holds only this pod's folder and its volumes."""
        root = self.kubelet.layout.root
        outside = [p for p in self.volumes.paths.values() if self.folder not in [p, *p.parents]]
        return runtime.hidden(root, [self.folder, *(p for p in outside if root in p.parents)], identity)

    # --- probes ----------------------------------------------------------------------------
    def _probe(self, c: Container) -> None:
        for kind, probe in (("Readiness", c.readiness), ("Liveness", c.liveness)):
            if probe is None or self.clock() < probe.due:
                continue
            probe.due = self.clock() + probe.spec.get("periodSeconds", 10)
            ok, why = self._check(c, probe.spec)
            if ok:
                probe.successes, probe.failures = probe.successes + 1, 0
                if probe.successes >= probe.spec.get("successThreshold", 1):
                    probe.ok = True
                continue
            probe.successes, probe.failures = 0, probe.failures + 1
            self.kubelet.event(self.pod, "Warning", "Unhealthy", f"{kind} probe failed: {why}")
            if probe.failures >= probe.spec.get("failureThreshold", 3):
                probe.ok = False
                if kind == "Liveness":
                    c.killed_for = f"Container {c.name} failed liveness probe, will be restarted"
                    self.kubelet.event(self.pod, "Normal", "Killing", c.killed_for)
                    c.proc.stop(self._grace())

    def _check(self, c: Container, spec: dict) -> tuple[bool, str]:
        timeout = spec.get("timeoutSeconds", 1)
        try:
            if "httpGet" in spec:
                get = spec["httpGet"]
                port = self._port(c, get["port"])
                host = get.get("host") or self.pod_ip
                url = f"{get.get('scheme', 'HTTP').lower()}://{host}:{port}{get.get('path', '/')}"
                import ssl

                context = ssl._create_unverified_context()  # the kubelet does not verify probe certificates either
                with urllib.request.urlopen(url, timeout=timeout, context=context) as answer:
                    return 200 <= answer.status < 400, f"HTTP probe failed with statuscode: {answer.status}"
            if "tcpSocket" in spec:
                target = (spec["tcpSocket"].get("host") or self.pod_ip, self._port(c, spec["tcpSocket"]["port"]))
                with socket.create_connection(target, timeout=timeout):
                    return True, ""
            if "exec" in spec:
                # As a runtime's exec: in the container's own mount, UTS and network namespaces, as its user,
                # with its env and folder, not this machine's view or the env of whoever started the cluster.
                if c.proc is None or c.proc.poll() is not None:
                    return False, "the container is not running"
                done = runtime.exec_in(c.proc.pid, c.identity, spec["exec"]["command"], c.proc.env, timeout)
                return done.returncode == 0, f"command exited {done.returncode}: {done.stdout.strip()[-200:]}"
            return False, "only httpGet, tcpSocket and exec probes run on the process node"
        except Exception as exc:
            return False, str(exc)

    @staticmethod
    def _port(c: Container, port) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in c.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f'port "{port}" is not a named port of container {c.name}')

    # --- stopping --------------------------------------------------------------------------
    def _grace(self) -> float:
        meta = self.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        return float(grace)

    def _kill_all(self, grace: float) -> None:
        """SIGTERM to every running container at once, the grace period, then SIGKILL."""
        stop_together([c.proc for c in self.containers() if c.running and c.proc.poll() is None], grace)
        for c in self.containers():
            if c.cgroup:
                c.cgroup.kill()
        for c in self.containers():
            if c.running:
                self._terminated(c, c.proc.poll())
                c.done = True

    def _remove_sandbox(self) -> None:
        for c in self.containers():
            if c.cgroup and not c.running:
                c.cgroup.kill()
                c.cgroup.remove()
        if self.netns is not None:
            self.kubelet.network.remove_sandbox(self.uid)
            self.kubelet.addresses.give_back(self.uid)
            self.netns, self.sandbox = None, False

    def _terminated(self, c: Container, code: int) -> None:
        """The container's terminated state, as the kubelet reports an exit; its log file closed."""
        if c.log:
            c.log.close()
        reason = "Completed" if code == 0 else "Error"
        if code != 0 and c.cgroup and c.cgroup.oom_killed():
            reason = "OOMKilled"  # the kernel killed it at its memory limit
        c.state = {"terminated": {"exitCode": code, "reason": reason,
                                  "startedAt": c.state["running"]["startedAt"], "finishedAt": now(),
                                  "containerID": f"process://{c.proc.pid}"}}
        if code >= 128:
            c.state["terminated"]["signal"] = code - 128
        if c.killed_for:
            c.state["terminated"]["message"] = c.killed_for
            c.killed_for = ""

    def _terminate(self, pod: dict) -> None:
        """A graceful deletion: stop the containers, report, and let the API server drop the pod."""
        from kubernetes import client

        for c in self.containers():
            if c.running:
                self.kubelet.event(pod, "Normal", "Killing", f"Stopping container {c.name}")
        self._kill_all(0 if self.gone else self._grace())
        if self.phase not in ("Succeeded", "Failed"):
            codes = [c.state.get("terminated", {}).get("exitCode") for c in self.main]
            self.phase = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
        if not self.gone:
            self._report()
            try:
                self.kubelet.core.delete_namespaced_pod(self.pod_name, self.namespace, body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=self.uid)))
            except client.ApiException as exc:
                if exc.status not in (404, 409):
                    raise
        self.volumes.remove()
        # Its logs, working directory and output go with it, as a kubelet removes a deleted pod's
        # folders (`kubectl logs` of a deleted pod has nothing to show either).
        try:
            shutil.rmtree(self.folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.kubelet.log(f"pod {self.namespace}/{self.pod_name}: could not remove {self.folder}: {exc}")

    # --- status ----------------------------------------------------------------------------
    def _condition(self, kind: str, status: bool, reason: str = "", message: str = "") -> dict:
        value = "True" if status else "False"
        old = self.conditions.get(kind)
        if old is None or old["status"] != value or old.get("reason", "") != reason:
            old = {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": now()}
            if reason:
                old["reason"] = reason
            if message:
                old["message"] = message
            self.conditions[kind] = old
        return old

    def status(self) -> dict:
        initialized = all(c.done and c.state.get("terminated", {}).get("exitCode") == 0 for c in self.init)
        waiting_init = [c.name for c in self.init if not (c.done and c.state.get("terminated", {}).get("exitCode") == 0)]
        unready = [c.name for c in self.main if not c.ready]
        terminal = self.phase in ("Succeeded", "Failed")
        ready_reason = "PodCompleted" if terminal else ("ContainersNotReady" if unready else "")
        ready_message = f"containers with unready status: [{' '.join(unready)}]" if unready and not terminal else ""
        conditions = [
            self._condition("PodReadyToStartContainers", self.sandbox),
            self._condition("Initialized", initialized, "" if initialized else "ContainersNotInitialized",
                            "" if initialized else f"containers with incomplete status: [{' '.join(waiting_init)}]"),
            *(self._condition(kind, not unready and not terminal, ready_reason, ready_message)
              for kind in ("Ready", "ContainersReady")),
        ]
        scheduled = [c for c in (self.pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
        status = {"phase": self.phase, "conditions": scheduled + conditions, "startTime": self.started_at,
                  "hostIP": self.kubelet.node_ip, "hostIPs": [{"ip": self.kubelet.node_ip}],
                  "containerStatuses": [c.status() for c in self.main]}
        if self.init:
            status["initContainerStatuses"] = [c.status() for c in self.init]
        if self.pod_ip:
            status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        return status

    def _report(self) -> None:
        status = self.status()
        if status == self.reported:
            return
        from kubernetes import client

        try:
            self.kubelet.core.patch_namespaced_pod_status(self.pod_name, self.namespace, {"status": status},
                                                          _content_type="application/merge-patch+json")
            self.reported = status
        except transient() as exc:  # the API server restarting: the next report carries the same status
            if isinstance(exc, client.ApiException) and exc.status == 404:
                self.gone = True
        # Anything else is a bug in this node, not the server's absence: it ends this pod's loop,
        # with its traceback in the node's log, rather than the pod's status never changing again.
