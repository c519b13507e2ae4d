"""`cluster up|status|down`: a real control plane with the operator, on this machine."""
from __future__ import annotations

import json

import click

from generator.cli.common import emit, format_option, image_option


def _layout(directory: str | None):
    """The cluster's folder, refused before anything reads it when another user could change what its
    path leads to (generator/trusted.py; never resolved through a link) or when it is another user's:
    their state file could name a kubeconfig of theirs, or what root is to stop and delete."""
    from generator import trusted
    from generator.controlplane.layout import FIX, Layout, default_dir

    layout = Layout(trusted.check(directory or default_dir(), "--dir", FIX, itself=False))
    layout.check_owned()
    return layout


dir_option = click.option("--dir", "directory", metavar="DIR",
                          help="The cluster's folder: certificates, etcd data, logs (default: .cache/cluster). Yours, "
                               "with no link in its path and every folder above it yours or root's and writable by "
                               "nobody else (sticky ones such as /tmp excepted).")


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
    from generator.controlplane.releases import kueue

    try:
        kueue.parse_quota(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.group("cluster")
def command() -> None:
    """A real control plane (etcd, kube-apiserver, controller-manager, scheduler), its node (the
    kubelet, containerd, runc and kube-proxy), and the operator."""


def _node_flag(ctx, param, value):
    """--node is left from when a second kind of node ran pods as this machine's processes."""
    if value not in (None, "real"):
        from generator.controlplane.realnode import support

        raise click.BadParameter(f"{value!r}: {support.ONE_NODE}")
    return value


node_option = click.option("--node", "_node", metavar="real", callback=_node_flag, hidden=True, expose_value=False,
                           help="The node kind; `real` is the only one.")


@command.command("up")
@click.option("-f", "--values", "values_file", metavar="FILE", help="Values for charts/pytorch-operator.")
@click.option("--timeout", type=click.IntRange(min=10), default=600, show_default=True,
              help="Seconds to wait for the cluster (not counting the first build).")
@click.option("--cpu", metavar="QUANTITY", callback=_quantity,
              help="The node's allocatable CPU, at most this machine's (the kubelet reserves the rest); default: "
                   "this machine's CPUs.")
@click.option("--memory", metavar="QUANTITY", callback=_quantity,
              help="The node's allocatable memory, below this machine's (the kubelet reserves the rest); default: "
                   "this machine's memory less the kubelet's eviction threshold.")
@click.option("--gpus", type=click.IntRange(min=0), default=0, show_default=True,
              help="nvidia.com/gpu the node advertises in its capacity, so GPU jobs schedule; their pods get no "
                   "device and train on the CPU (the trainer with --backend gloo).")
@click.option("--nodes", "count", type=click.IntRange(1, 8), default=1, show_default=True,
              help="How many nodes, each its own kubelet, containerd and kube-proxy in a network namespace of its "
                   "own, every one with --cpu, --memory and --gpus; the cluster's controllers run on the first.")
@click.option("--node-grace-period", "grace", type=click.IntRange(min=10), metavar="SECONDS",
              help="Seconds a node may stop answering before Kubernetes marks it NotReady (node-monitor-grace-period; "
                   "default Kubernetes' 50): shorten it to rehearse a node's loss (`cluster node kill`).")
@image_option
@click.option("--pod-security", type=click.Choice(["privileged", "baseline", "restricted"]), default="baseline",
              show_default=True, help="The Pod Security Standard enforced in namespaces that set none by label "
                                      "(pod-security.kubernetes.io/enforce).")
@click.option("--operator/--no-operator", default=True, show_default=True,
              help="Install charts/pytorch-operator as the Helm release training-operator; without it, `helm install` it yourself.")
@node_option
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
def up(values_file, timeout, cpu, memory, gpus, count, grace, aliases, pod_security, operator, trainer, kueue,
       kueue_quota, directory) -> None:
    """Start the control plane and its node (the kubelet, containerd, runc and kube-proxy: root,
    writable cgroups, runc, iptables and the CNI plugins, installed from Debian's packages when
    missing), install the operator chart; print `export KUBECONFIG=...`.

    \b
    Protected from other users of this machine: the cluster's folder (0700: CA and keys,
    kubeconfigs, tokens, etcd's data, volumes); etcd (mutual TLS, the API server alone); the API
    server and the kubelet (TLS, no anonymous requests); the registry (mutual TLS); the pods and
    CoreDNS (a firewall chain lets only root on this machine reach the cluster's pod addresses).
    Pods run in containers (runc) as their securityContext says, each in its own cgroup with its
    memory and CPU limits, under the Pod Security Standard of --pod-security.
    \b
    Not protected: whoever holds the admin kubeconfig can create privileged pods, which are root
    on this machine; keep the kubeconfig to yourself."""
    from generator.controlplane import lifecycle
    from generator.controlplane.realnode import support
    from generator.controlplane.state import NodeOptions

    if values_file and not operator:
        raise click.UsageError("-f gives values for the operator release, which --no-operator leaves out")
    hosted = support.hosted_image(dict(aliases))
    if hosted:
        raise click.UsageError(hosted)
    if kueue_quota and not kueue:
        raise click.UsageError("--kueue-quota sizes Kueue's ClusterQueue: add --kueue")
    layout = _layout(directory)
    node = NodeOptions(cpu, memory, gpus, dict(aliases), pod_security, count, grace)
    support.system_reserved(node, support.Capacity.read())  # refused before anything starts
    if lifecycle.running(layout) is None:
        lifecycle.check_machine(layout, _say)
    state = lifecycle.up(layout, lifecycle.Releases(operator, values_file, trainer, kueue, kueue_quota), timeout,
                         say=_say, node=node)
    from generator.controlplane import build

    installed = (f"operator release {state.operator.release} in namespace {state.operator.namespace}"
                 if state.operator else "no operator: helm install it")
    if state.trainer:
        installed += f", Trainer release {state.trainer.release} in namespace {state.trainer.namespace}"
    if state.kueue:
        installed += f", Kueue release {state.kueue.release} in namespace {state.kueue.namespace}"
    nodes = f"node {state.node}" if len(state.nodes) < 2 else f"nodes {', '.join(state.nodes)}"
    click.echo(f"cluster ready: {state.server}, {nodes} ({installed}); "
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
    if report["node"]:
        from generator.controlplane.realnode import support

        click.echo(f"node: {report['node']} ({support.RUNS})")
    for p in report["processes"]:
        click.echo(f"{p['name']:<26}{p['pid']:>8}  {'running' if p['running'] else 'stopped':<8}  {p['log']}")
    if len(report["nodes"]) > 1 or any(n["phase"] != "ready" for n in report["nodes"]):
        _node_lines(report["nodes"])
    for pod in report["pods"]:
        state = f"{pod['phase']}{', ready' if pod['ready'] else ''}"
        click.echo(f"pod {pod['namespace']}/{pod['name']}  {state}  (release {pod['release']})")


def _node_lines(nodes: list[dict]) -> None:
    for n in nodes:
        seen = {"True": "Ready", "False": "NotReady", "Unknown": "Unknown", None: "no Node"}[n["condition"]]
        pids = ", ".join(f"{k} {v}" for k, v in n["processes"].items()) or "no processes"
        click.echo(f"node {n['name']}: {n['phase']} since {n['since']}, {seen} to the API server ({pids})")


@command.group("node")
def node_group() -> None:
    """The cluster's nodes: list them, kill one (its power pulled) and start it again, to rehearse
    a node's loss."""


def _running(directory):
    from generator.controlplane import lifecycle

    layout = _layout(directory)
    current = lifecycle.running(layout)
    if current is None:
        from generator.errors import UserError

        raise UserError(f"no cluster runs in {layout.root}; start one with `python -m generator cluster up "
                                   f"--nodes 3 --dir {layout.root}`")
    return layout, current


@node_group.command("list")
@format_option
@dir_option
def node_list(fmt, directory) -> None:
    """Each node: its phase here (starting, ready, killed) and since when, its Ready condition as
    the API server has it, and its processes."""
    from generator.controlplane import lifecycle

    layout, current = _running(directory)
    nodes = lifecycle.nodes(layout, current)
    if fmt == "json":
        emit(json.dumps(nodes, indent=2) + "\n", None)
        return
    _node_lines(nodes)


@node_group.command("kill")
@click.argument("name")
@dir_option
def node_kill(name, directory) -> None:
    """Pull NAME's power: its kubelet, containerd, shims, kube-proxy and containers killed at once,
    its network down, only its folder left. Its pods stay bound to it until Kubernetes evicts them."""
    from generator.controlplane import requests

    layout, _ = _running(directory)
    click.echo(requests.ask(layout, "kill", name, 60))


@node_group.command("start")
@click.argument("name")
@click.option("--timeout", type=click.IntRange(min=10), default=300, show_default=True,
              help="Seconds to wait for the node to be Ready again.")
@dir_option
def node_start(name, timeout, directory) -> None:
    """Boot a killed node again from its folder: its kubelet registers (anew, if its Node was deleted)
    and ends the pods it held, so their controllers replace them."""
    from generator.controlplane import requests

    layout, _ = _running(directory)
    click.echo(requests.ask(layout, "start", name, timeout))


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
@node_option
def build_cmd() -> None:
    """Build the control plane's and the node's binaries from Go modules (and the node's sandbox
    image; runc, iptables and the CNI plugins from Debian's packages when missing), once per
    machine, into the user's cache ($PYTORCHJOB_KIT_CACHE, else $XDG_CACHE_HOME/pytorchjob-kit or
    ~/.cache/pytorchjob-kit)."""
    from generator.controlplane import build, lifecycle

    lifecycle.check_machine(None, _say)  # installs runc, iptables and the CNI plugins where the node would
    every = list(build.table())  # the control plane's groups, then the node's
    missing = set(build.missing(every))
    paths = build.ensure(say=_say, groups=every)
    for folder in dict.fromkeys(p.parent for p in paths.values()):
        names = [n for n, p in paths.items() if p.parent == folder]
        state = "built" if missing & set(names) else "up to date"
        click.echo(f"{state}: {', '.join(names)} in {folder}")
