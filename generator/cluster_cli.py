"""Cluster commands: submit, status, logs, wait, delete. The kubernetes client is imported
only when one of them runs, so the other commands start fast."""
from __future__ import annotations

import json
import sys
import time

import click

from .errors import UserError

EXIT_TIMEOUT = 2


def cluster_options(fn):
    fn = click.option("--kubeconfig", metavar="FILE", help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")(fn)
    fn = click.option("--context", help="Kubeconfig context (default: the current one).")(fn)
    fn = click.option("-n", "--namespace", help="Namespace (default: the context's).")(fn)
    return fn


def _connect(context, namespace, kubeconfig):
    from . import cluster

    return cluster.connect(context, namespace, kubeconfig)


def register(cli: click.Group) -> None:
    cli.add_command(submit_cmd)
    cli.add_command(status_cmd)
    cli.add_command(logs_cmd)
    cli.add_command(wait_cmd)
    cli.add_command(delete_cmd)


@click.command("submit")
@click.argument("file", metavar="VALUES|MANIFEST")
@click.option("--release", default="release", show_default=True, help="Helm release name for values files.")
@click.option("--dry-run", is_flag=True, help="Have the server validate without persisting anything.")
@click.option("--wait", "wait_", is_flag=True, help="Follow the job to its end; exit 1 if it fails.")
@click.option("--replace", is_flag=True, help="Delete a finished job of the same name first.")
@click.option("--timeout", type=click.IntRange(min=1), default=86400, show_default=True, help="Seconds --wait waits.")
@cluster_options
def submit_cmd(file, release, dry_run, wait_, replace, timeout, context, namespace, kubeconfig) -> None:
    """Validate a job and apply it (server-side apply): the output PVC, then the PyTorchJob."""
    from . import cluster, job_source

    c = _connect(context, namespace, kubeconfig)
    objects = job_source.load(file, release, c.namespace)
    job = job_source.pytorchjob(objects)
    written = job.setdefault("metadata", {}).get("namespace")
    if written and written != c.namespace:
        if namespace:  # as kubectl: a manifest's namespace and -n must agree
            raise UserError(f"{file} puts PyTorchJob {job['metadata']['name']} in namespace {written} but --namespace "
                            f"is {namespace}; drop one of them or make them agree")
        c.namespace = written
    for obj in objects:
        obj.setdefault("metadata", {})["namespace"] = c.namespace
    name = job["metadata"]["name"]
    existing = cluster.get_job(c, name)
    state, _ = cluster.condition(existing or {})
    if existing and state in cluster.TERMINAL:
        if not replace:
            raise UserError(f"PyTorchJob {name} in namespace {c.namespace} already finished ({state}); a finished job "
                            "does not run again: pass --replace to delete it and submit anew, or choose another name")
        if not dry_run:
            cluster.delete_job(c, name)
            _wait_gone(c, name)
            existing = None
            click.echo(f"pytorchjob {name} deleted (it had {state.lower()})", err=True)
    for pvc in (o for o in objects if o.get("kind") == "PersistentVolumeClaim"):
        cluster.apply_pvc(c, pvc, dry_run)
        click.echo(f"persistentvolumeclaim {pvc['metadata']['name']} applied{' (dry run)' if dry_run else ''}", err=True)
    before = (existing or {}).get("metadata", {}).get("resourceVersion")
    applied = cluster.apply_job(c, job, dry_run)
    after = applied.get("metadata", {}).get("resourceVersion")
    verdict = "created" if not existing else ("unchanged" if before == after else "configured")
    click.echo(f"pytorchjob {name} {verdict}{' (dry run: nothing was persisted)' if dry_run else ''}")
    if wait_ and not dry_run:
        sys.exit(_wait_for(c, name, "Succeeded", timeout, progress=True))


def _wait_gone(c, name: str, seconds: float = 120) -> None:
    from . import cluster

    end = time.monotonic() + seconds
    while cluster.get_job(c, name) is not None:
        if time.monotonic() > end:
            raise UserError(f"PyTorchJob {name} is still being deleted after {seconds:g}s; try again shortly")
        time.sleep(0.5)


@click.command("status")
@click.argument("name")
@click.option("--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@cluster_options
def status_cmd(name, fmt, context, namespace, kubeconfig) -> None:
    """Conditions, replica counts and times of a job."""
    from . import cluster

    c = _connect(context, namespace, kubeconfig)
    job = cluster.get_job(c, name)
    if job is None:
        raise UserError(f"PyTorchJob {name} not found in namespace {c.namespace}; list them with "
                        f"`kubectl get pytorchjobs -n {c.namespace}`")
    status = job.get("status") or {}
    state, last = cluster.condition(job)
    replicas = {role: {k: int(v.get(k, 0) or 0) for k in ("active", "succeeded", "failed")}
                for role, v in (status.get("replicaStatuses") or {}).items()}
    report = {"name": name, "namespace": c.namespace, "state": state or "Created",
              "conditions": [{k: cond.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                             for cond in status.get("conditions") or []],
              "replicas": replicas, "startTime": status.get("startTime"), "completionTime": status.get("completionTime"),
              "reason": last.get("reason"), "message": last.get("message")}
    if fmt == "json":
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"PyTorchJob {name} (namespace {c.namespace}): {report['state']}")
    click.echo(f"started: {report['startTime'] or '-'}   completed: {report['completionTime'] or '-'}")
    click.echo(f"{'REPLICA':<10}{'ACTIVE':>8}{'SUCCEEDED':>11}{'FAILED':>8}")
    for role, counts in sorted(replicas.items()):
        click.echo(f"{role:<10}{counts['active']:>8}{counts['succeeded']:>11}{counts['failed']:>8}")
    click.echo(f"{'CONDITION':<12}{'STATUS':<8}{'REASON':<28}{'SINCE':<22}MESSAGE")
    for cond in report["conditions"]:
        click.echo(f"{cond['type'] or '':<12}{cond['status'] or '':<8}{cond['reason'] or '':<28}"
                   f"{cond['lastTransitionTime'] or '':<22}{cond['message'] or ''}")
    if last:
        click.echo(f"last: {last.get('reason')}: {last.get('message')}")


@click.command("logs")
@click.argument("name")
@click.option("--replica", metavar="ROLE-INDEX", help="One replica, e.g. master-0 or worker-1.")
@click.option("-f", "--follow", is_flag=True, help="Stream, waiting through Pending pods and container restarts.")
@click.option("--previous", is_flag=True, help="The log of the container before its last restart.")
@cluster_options
def logs_cmd(name, replica, follow, previous, context, namespace, kubeconfig) -> None:
    """Logs of every pod of a job, prefixed master-0 / worker-1, or of one replica."""
    from . import cluster, cluster_logs

    c = _connect(context, namespace, kubeconfig)
    if cluster.get_job(c, name) is None:
        raise UserError(f"PyTorchJob {name} not found in namespace {c.namespace}")
    if follow:
        cluster_logs.follow(c, name, replica, click.echo)
    else:
        cluster_logs.dump(c, name, replica, previous, click.echo)


@click.command("wait")
@click.argument("name")
@click.option("--for", "target", type=click.Choice(["Succeeded", "Failed", "Running"]), default="Succeeded",
              show_default=True)
@click.option("--timeout", type=click.IntRange(min=1), default=3600, show_default=True, help="Seconds.")
@cluster_options
def wait_cmd(name, target, timeout, context, namespace, kubeconfig) -> None:
    """Exit 0 when the job reaches the condition, 1 when it ends otherwise, 2 on timeout."""
    c = _connect(context, namespace, kubeconfig)
    sys.exit(_wait_for(c, name, target, timeout))


def _wait_for(c, name: str, target: str, timeout: int, progress: bool = False) -> int:
    """Watches the job; the exit status the wait command documents."""
    from kubernetes import watch

    from . import cluster

    end = time.monotonic() + timeout
    seen = None
    job = cluster.get_job(c, name)
    if job is None:
        raise UserError(f"PyTorchJob {name} not found in namespace {c.namespace}")
    while True:
        state, cond = cluster.condition(job)
        if progress and state != seen:
            click.echo(f"pytorchjob {name}: {state or 'Created'}" + (f" ({cond.get('reason')})" if cond.get("reason") else ""),
                       err=True)
            seen = state
        if state == target:
            click.echo(f"pytorchjob {name} {target.lower()}")
            return 0
        if state in cluster.TERMINAL:
            failed = _first_failed_pod(c, name)
            click.echo(f"pytorchjob {name} ended {state}, not {target}: {cond.get('reason')}: {cond.get('message')}"
                       + (f"; first failed pod: {failed}" if failed else ""), err=True)
            return 1
        left = end - time.monotonic()
        if left <= 0:
            click.echo(f"pytorchjob {name} is still {state or 'Created'} after {timeout}s; timed out waiting for "
                       f"{target}", err=True)
            return EXIT_TIMEOUT
        stream = watch.Watch()
        try:
            for event in stream.stream(c.custom.list_namespaced_custom_object, cluster.GROUP, cluster.VERSION,
                                       c.namespace, cluster.PLURAL, field_selector=f"metadata.name={name}",
                                       timeout_seconds=max(1, int(min(left, 30)))):
                if event["type"] == "DELETED":
                    raise UserError(f"PyTorchJob {name} was deleted while waiting for {target}")
                job = event["object"]
                if cluster.condition(job)[0] != state:
                    break
        except UserError:
            raise
        except Exception as exc:
            raise cluster.explain(exc, c, "watch", cluster.PLURAL, name) from exc
        finally:
            stream.stop()


def _first_failed_pod(c, name: str) -> str:
    from . import cluster

    for pod in cluster.pods(c, name):
        for status in pod.status.container_statuses or []:
            terminated = (status.state and status.state.terminated) or (status.last_state and status.last_state.terminated)
            if terminated and terminated.exit_code:
                return (f"{pod.metadata.name} (container {status.name} exited {terminated.exit_code}: "
                        f"{terminated.reason or 'Error'})")
        if pod.status.phase == "Failed":
            detail = ": ".join(x for x in (pod.status.reason or "Failed", pod.status.message) if x)
            return f"{pod.metadata.name} ({detail})"
    return ""


@click.command("delete")
@click.argument("name")
@click.option("--with-pvc", is_flag=True, help="Also delete the output PVC the chart created for this job.")
@cluster_options
def delete_cmd(name, with_pvc, context, namespace, kubeconfig) -> None:
    """Delete a job (its pods go with it) and, if asked, its chart-created output PVC."""
    from . import cluster

    c = _connect(context, namespace, kubeconfig)
    cluster.delete_job(c, name)
    click.echo(f"pytorchjob {name} deleted")
    if with_pvc:
        claim = f"{name}-output"
        pvc = cluster.call(c, "get", "persistentvolumeclaims", claim, c.core.read_namespaced_persistent_volume_claim,
                           claim, c.namespace)
        chart = (pvc.metadata.labels or {}).get("helm.sh/chart", "")
        if not chart.startswith("pytorchjob-"):
            raise UserError(f"PersistentVolumeClaim {claim} was not created by charts/pytorchjob (no helm.sh/chart "
                            "label of it); delete it yourself if you mean to: kubectl delete pvc " + claim)
        cluster.call(c, "delete", "persistentvolumeclaims", claim, c.core.delete_namespaced_persistent_volume_claim,
                     claim, c.namespace)
        click.echo(f"persistentvolumeclaim {claim} deleted")

