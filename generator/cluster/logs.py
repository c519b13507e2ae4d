"""Pod logs of a job, interleaved with replica prefixes; following waits through Pending
pods and container restarts instead of giving up."""
from __future__ import annotations

import threading
import time

from generator.cluster import client as cluster
from generator.errors import UserError
from generator.kinds.base import JobKind

POLL_SECONDS = 0.5


class NoReplica(UserError):
    """The replica asked for has no pod (yet)."""


def _select(c, job: str, replica: str | None, kind: JobKind) -> list:
    found = cluster.pods(c, job, kind)
    if replica:
        chosen = [p for p in found if cluster.replica_name(p) == replica]
        if not chosen:
            names = ", ".join(cluster.replica_name(p) for p in found) or "none yet"
            raise NoReplica(f"--replica {replica}: no such pod in {kind.kind} {job} (replicas: {names}); write "
                            f"{kind.replica_form}")
        return chosen
    return found


def _split(line: str) -> tuple[str, str]:
    stamp, _, text = line.partition(" ")
    return stamp, text


def dump(c, job: str, replica: str | None, previous: bool, echo, kind: JobKind) -> None:
    """Every selected pod's log, merged in time order by the kubelet's timestamps."""
    from kubernetes.client.exceptions import ApiException

    entries = []
    selected = _select(c, job, replica, kind)
    if not selected:
        echo(f"{kind.kind} {job} has no pods yet; its controller creates them once it admits the job "
             "(--follow waits for them)", err=True)
    for pod in selected:
        name = cluster.replica_name(pod)
        try:
            text = c.core.read_namespaced_pod_log(pod.metadata.name, c.namespace, container=kind.container,
                                                  previous=previous, timestamps=True)
        except ApiException as exc:
            if exc.status == 400:  # no log yet (Pending) or no previous container
                reason = cluster.error_body(exc).get("message", exc.reason)
                echo(f"{name}: no log: {reason}", err=True)
                continue
            if exc.status == 404:  # deleted since it was listed: a finished job's pods go (cleanPodPolicy)
                echo(f"{name}: no log: pod {pod.metadata.name} was deleted", err=True)
                continue
            raise cluster.explain(exc, c, "get logs of", "pods", pod.metadata.name) from exc
        except Exception as exc:
            raise cluster.explain(exc, c, "get logs of", "pods", pod.metadata.name) from exc
        for line in text.splitlines():
            stamp, body = _split(line)
            entries.append((stamp, name, body))
    width = max((len(n) for _, n, _ in entries), default=0)
    for _, name, body in sorted(entries, key=lambda e: e[0]):
        echo(f"{name.ljust(width)} | {body}")


def follow(c, job: str, replica: str | None, echo, tick=None, *, kind: JobKind) -> None:
    """Stream until the job has ended and every followed container has stopped. `tick` sees the
    job's state on every poll."""
    lock = threading.Lock()
    threads: dict[str, threading.Thread] = {}
    stop = threading.Event()
    announced = False
    closed: list[BrokenPipeError] = []  # the reader went away (`| head`): every pod's thread stops

    def say(name: str, text: str, err: bool = False) -> None:
        with lock:
            if closed:
                return
            try:
                echo(f"{name} | {text}", err=err)
            except BrokenPipeError as exc:
                closed.append(exc)
                stop.set()

    try:
        while True:
            if closed:
                raise closed[0]
            try:
                selected = _select(c, job, replica, kind)
            except NoReplica:
                selected = []  # the replica's pod is not created yet: keep waiting for it
                if not announced:
                    say(replica, "waiting for the pod to be created", err=True)
                    announced = True
            for pod in selected:
                uid = pod.metadata.uid or pod.metadata.name
                if uid not in threads:
                    threads[uid] = threading.Thread(target=_follow_pod, daemon=True, args=(
                        c, pod.metadata.name, cluster.replica_name(pod), say, stop, kind.container))
                    threads[uid].start()
            current = cluster.get_job(c, job, kind)
            ended = current is None or cluster.condition(current)[0] in cluster.TERMINAL
            if tick and current is not None:
                with lock:
                    tick(cluster.condition(current)[0])
            if ended and not any(t.is_alive() for t in threads.values()):
                if closed:
                    raise closed[0]
                return
            stop.wait(POLL_SECONDS)
    finally:
        stop.set()


def _container(pod, container: str):
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == container:
            return status
    return None


def _print_previous(c, pod_name: str, name: str, say, last_stamp: str, container: str) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        text = c.core.read_namespaced_pod_log(pod_name, c.namespace, container=container, previous=True,
                                              timestamps=True)
    except ApiException:
        return last_stamp
    for line in text.splitlines():
        stamp, body = _split(line)
        if stamp > last_stamp:
            say(name, body)
            last_stamp = stamp
    return last_stamp


# What a followed pod meets while it starts or restarts, and while the API server or the connection
# hiccups: its log not there yet (400), a 404 between two looks, throttling, server errors.
TRANSIENT_STATUSES = (400, 404, 429, 500, 502, 503, 504)


def _transient(exc: Exception) -> bool:
    """Whether following the pod again shortly can get past this error."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUSES
    return isinstance(exc, (HTTPError, OSError))  # a dropped stream, a timeout, a refused connection


def _follow_pod(c, pod_name: str, name: str, say, stop: threading.Event, container: str) -> None:
    """Retries only what is transient; anything else is said once and ends following this pod."""
    def give_up(exc: Exception, verb: str) -> None:
        say(name, f"stopped following: {cluster.explain(exc, c, verb, 'pods', pod_name).describe()}", err=True)

    last_stamp = ""
    waiting_said = ""
    restarts = None
    while not stop.is_set():
        try:
            pod = c.core.read_namespaced_pod(pod_name, c.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                say(name, "pod deleted", err=True)
                return
            if not _transient(exc):  # retrying cannot help: say why and stop following it
                give_up(exc, "get")
                return
            time.sleep(POLL_SECONDS)
            continue
        status = _container(pod, container)
        waiting = status.state.waiting if status and status.state else None
        if pod.status.phase == "Pending" or waiting or status is None:
            reason = (waiting.reason if waiting else None) or pod.status.phase
            if reason != waiting_said:
                say(name, f"waiting: {reason}", err=True)
                waiting_said = reason
            time.sleep(POLL_SECONDS)
            continue
        if restarts is None and waiting_said and status.restart_count > 0:
            # We watched it start, yet it already restarted between two looks: show the life we missed.
            last_stamp = _print_previous(c, pod_name, name, say, last_stamp, container)
            restarts = status.restart_count - 1
        if restarts is not None and status.restart_count > restarts:
            say(name, f"container restarted (restart {status.restart_count})", err=True)
        restarts = status.restart_count
        waiting_said = ""
        try:
            response = c.core.read_namespaced_pod_log(pod_name, c.namespace, container=container, follow=True,
                                                      timestamps=True, _preload_content=False)
            buffer = ""
            for chunk in response.stream(4096):
                if stop.is_set():  # nobody reads any more: hang up instead of draining the stream
                    response.close()
                    return
                buffer += chunk.decode("utf-8", "replace")
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    stamp, body = _split(line)
                    if stamp <= last_stamp:
                        continue  # already shown before a reconnect
                    last_stamp = stamp
                    say(name, body)
            response.release_conn()
        except Exception as exc:
            if not _transient(exc):
                give_up(exc, "get logs of")
                return
            time.sleep(POLL_SECONDS)
            continue
        try:
            pod = c.core.read_namespaced_pod(pod_name, c.namespace)
        except Exception as exc:
            if not _transient(exc):
                give_up(exc, "get")
                return
            time.sleep(POLL_SECONDS)
            continue  # the next look says whether it is gone or restarting
        status = _container(pod, container)
        if status and status.restart_count > restarts:
            continue  # a new container already: attach to it at once, so none of its lines are missed
        if pod.status.phase in ("Succeeded", "Failed"):
            return
        time.sleep(POLL_SECONDS)  # the kubelet will restart the container: attach to the next one
