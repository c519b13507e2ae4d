"""`cluster up|status|down`: a real control plane with the operator, on this machine."""
from __future__ import annotations

import json
from pathlib import Path

import click

from generator.cli.common import emit, format_option, image_option


def _layout(directory: str | None):
    from generator.controlplane.layout import Layout, default_dir

    return Layout(Path(directory).resolve() if directory else default_dir())



dir_option = click.option("--dir", "directory", metavar="DIR",
                          help="The cluster's folder: certificates, etcd data, logs (default: .cache/cluster).")


def _say(line: str) -> None:
    click.echo(line, err=True)


def _quantity(ctx, param, value):
    if value is None:
        return None
    from generator.job import quantity

    try:
        if quantity.parse(value) <= 0:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a positive quantity; {quantity.hint_for(value)}") from None
    return value


def _kueue_quota(ctx, param, value):
    if value is None:
        return None
    from generator.controlplane import kueue_release

    try:
        kueue_release.parse_quota(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.group("cluster")
def command() -> None:
    """A real control plane (etcd, kube-apiserver, controller-manager, scheduler), a node (the kubelet,
    containerd and runc, or one that runs pods as processes), and the operator."""


@command.command("up")
@click.option("-f", "--values", "values_file", metavar="FILE", help="Values for charts/pytorch-operator.")
@click.option("--timeout", type=click.IntRange(min=10), default=600, show_default=True,
              help="Seconds to wait for the cluster (not counting the first build).")
@click.option("--cpu", metavar="QUANTITY", callback=_quantity, help="The process node's CPU capacity (default: this machine's CPUs).")
@click.option("--memory", metavar="QUANTITY", callback=_quantity, help="The process node's memory (default: this machine's).")
@click.option("--gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="nvidia.com/gpu the process node offers, so GPU jobs schedule; they still run on the CPU.")
@image_option
@click.option("--pod-security", type=click.Choice(["privileged", "baseline", "restricted"]), default="baseline",
              show_default=True, help="The Pod Security Standard enforced in namespaces that set none by label "
                                      "(pod-security.kubernetes.io/enforce).")
@click.option("--operator/--no-operator", default=True, show_default=True,
              help="Install charts/pytorch-operator as the Helm release training-operator; without it, `helm install` it yourself.")
@click.option("--node", "node_kind", type=click.Choice(["real", "process"]),
              help="real: the kubelet, containerd, runc and kube-proxy run pods from images, pulled from the registry "
                   "on this machine; built on first use, needs root, writable cgroups, runc, iptables and the CNI "
                   "plugins (installed from Debian's packages when missing). process: pods run as processes of this "
                   "machine (the process kubelet). Default: real where it can run and no process-node option "
                   "(--cpu, --memory, --gpus, --image REPO=host) is given, else process, saying why on stderr; a running "
                   "cluster keeps its node.")
@click.option("--trainer", is_flag=True,
              help="Also install Kubeflow Trainer v2.3.0 with JobSet v0.12.0 (upstream's kubeflow-trainer chart, "
                   "release kubeflow-trainer in kubeflow-system), beside the v1 operator, for `--target v2` jobs.")
@click.option("--kueue", is_flag=True,
              help="Also install Kueue v0.19.2 (its chart, release kueue in kueue-system) for PyTorchJobs and TrainJobs, "
                   "with a ClusterQueue as large as the node and the LocalQueue `default` in namespace default.")
@click.option("--kueue-quota", metavar="QUOTA", callback=_kueue_quota,
              help="The ClusterQueue's quota instead of the node's, as cpu=3,memory=8Gi,nvidia.com/gpu=1 (each one "
                   "given replaces the node's); `none` creates no queues.")
@dir_option
def up(values_file, timeout, cpu, memory, gpus, aliases, pod_security, operator, node_kind, trainer, kueue, kueue_quota,
       directory) -> None:
    """Start the control plane and its node (the real one where it can run, else the process node: see --node),
    install the operator chart; print `export KUBECONFIG=...`.

    \b
    Protected from other users of this machine: the cluster's folder (0700: CA and keys,
    kubeconfigs, tokens, etcd's data, volumes); etcd (mutual TLS, the API server alone); the API
    server and the kubelet (TLS, no anonymous requests). Pods run as their securityContext says
    (user, groups, capabilities, read-only root), each in its own cgroup with its memory and CPU
    limits, and see only their own pod's folder.
    \b
    Not protected: a pod without a securityContext runs as root on this machine, so whoever can
    create pods (the admin kubeconfig) is root here; keep the kubeconfig to yourself."""
    from generator.controlplane import lifecycle
    from generator.controlplane.realnode import support
    from generator.controlplane.state import NodeOptions

    if values_file and not operator:
        raise click.UsageError("-f gives values for the operator release, which --no-operator leaves out")
    process_only = support.process_only(cpu, memory, gpus, dict(aliases))
    if node_kind == "real" and process_only:
        fix = ("lay your folder over an image instead (`--image REPO:TAG=DIR[:PATH]`), put your own image into the "
               "registry on this machine (`python -m generator image load IMAGE`), or use --node process" if aliases else
               "drop them, and lower the jobs' requests where they do not fit (or use --node process)")
        raise click.UsageError(f"{process_only}: {fix}")
    if kueue_quota and not kueue:
        raise click.UsageError("--kueue-quota sizes Kueue's ClusterQueue: add --kueue")
    layout = _layout(directory)
    kind, line = lifecycle.choose_node(node_kind, lifecycle.node_kind(lifecycle.running(layout)), layout.root,
                                       process_only, lambda install: lifecycle.real_node_cannot(layout, install, _say))
    if line:
        _say(line)
    from generator.container.programs import by_repository

    # The real node pulls each REPO:TAG from the registry; the process node's programs stand for every tag.
    images = dict(aliases) if kind == "real" else by_repository(aliases)
    state = lifecycle.up(layout, values_file, timeout, say=_say,
                         node=NodeOptions(cpu, memory, gpus, images, pod_security, kind),
                         operator=operator,
                         trainer=trainer, kueue=kueue, kueue_quota=kueue_quota)
    from generator.controlplane import build

    installed = (f"operator release {state.operator.release} in namespace {state.operator.namespace}"
                 if state.operator else "no operator: helm install it")
    if state.trainer:
        installed += f", Trainer release {state.trainer.release} in namespace {state.trainer.namespace}"
    if state.kueue:
        installed += f", Kueue release {state.kueue.release} in namespace {state.kueue.namespace}"
    click.echo(f"cluster ready: {state.server}, node {state.node} ({installed}); "
               f"kubectl is {build.binary('kubectl')}", err=True)
    click.echo(f"export KUBECONFIG={state.kubeconfig}")


@command.command("status")
@format_option
@dir_option
def status(fmt, directory) -> None:
    """What runs, with each process's log file."""
    from generator.controlplane import lifecycle

    report = lifecycle.status(_layout(directory))
    if fmt == "json":
        emit(json.dumps(report, indent=2) + "\n", None)
        return
    click.echo(f"cluster in {report['dir']}: {report['phase']}" + (f" ({report['error']})" if report["error"] else ""))
    if report["server"] and report["phase"] != "stopped":
        click.echo(f"server: {report['server']}   KUBECONFIG={report['kubeconfig']}")
    if report["node_kind"] and report["phase"] not in ("stopped", "absent"):
        from generator.controlplane.realnode import support

        click.echo(f"node: real ({support.RUNS})" if report["node_kind"] == "real" else f"node: {report['node_kind']}")
    for p in report["processes"]:
        click.echo(f"{p['name']:<26}{p['pid']:>8}  {'running' if p['running'] else 'stopped':<8}  {p['log']}")
    for pod in report["pods"]:
        state = f"{pod['phase']}{', ready' if pod['ready'] else ''}"
        click.echo(f"pod {pod['namespace']}/{pod['name']}  {state}  (release {pod['release']})")


@command.command("down")
@dir_option
@click.option("--purge", is_flag=True, help="Also remove the cluster's keys, tokens, etcd data, volumes and logs, so "
                                           "the next `cluster up` makes a new CA.")
def down(directory, purge) -> None:
    """Stop everything `cluster up` started."""
    from generator.controlplane import teardown

    layout = _layout(directory)
    if purge:
        layout.check_ours()  # before anything is stopped: --purge of a folder that is no cluster's does nothing
    stopped = teardown.down(layout, warn=lambda message: click.echo(f"warning: {message}", err=True))
    click.echo("stopped: " + ", ".join(stopped) if stopped else "nothing was running")
    if purge:
        removed = teardown.purge(layout)
        click.echo("removed: " + ", ".join(removed) if removed else "nothing to remove")


@command.command("build")
@click.option("--node", "node_kind", type=click.Choice(["real", "process"]),
              help="real: also the real node's kubelet, containerd, runc shim, ctr, CoreDNS and pause image (runc and "
                   "the CNI plugins from Debian's packages when missing). Default: real where the real node can run "
                   "(as `cluster up` chooses), else process, saying why on stderr.")
def build_cmd(node_kind) -> None:
    """Build the control plane's binaries from Go modules, once per machine, into the user's cache
    ($PYTORCHJOB_KIT_CACHE, else $XDG_CACHE_HOME/pytorchjob-kit or ~/.cache/pytorchjob-kit)."""
    from generator.controlplane import build, lifecycle

    node_kind, line = lifecycle.choose_node(node_kind, cannot=lambda install: lifecycle.real_node_cannot(None, install,
                                                                                                        _say))
    if line:
        _say(line)
    missing = set(build.missing())
    paths = build.ensure(say=_say)
    if node_kind == "real":
        from generator.controlplane.realnode import build as real_build

        missing |= set(real_build.missing())
        paths = {**paths, **real_build.ensure(say=_say)}
    for folder in dict.fromkeys(p.parent for p in paths.values()):
        names = [n for n, p in paths.items() if p.parent == folder]
        state = "built" if missing & set(names) else "up to date"
        click.echo(f"{state}: {', '.join(names)} in {folder}")
