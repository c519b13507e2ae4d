"""Options and output helpers every command spells the same way."""
from __future__ import annotations

import click

from generator import kinds
from generator.errors import Finding, UserError

DEFAULT_RELEASE = "release"


def _name(kind: str):
    """A click callback that refuses a name Helm or Kubernetes would refuse, before anything uses it
    (a release such as `--set=x` would otherwise become a flag of the helm command line)."""
    def check(ctx, param, value):
        from generator.job.kube import name_problem

        problem = value is not None and name_problem(kind, value)
        if problem:
            raise click.BadParameter(f"{value!r} {problem}; for example `{'my-job' if kind == 'release' else 'training'}`")
        return value
    return check


def release_option(fn):
    return click.option("--release", default=DEFAULT_RELEASE, show_default=True, callback=_name("release"),
                        help="Helm release name for values files (the default job name is <release>-pytorchjob).")(fn)


def namespace_option(help: str, default: str | None = "default"):
    return click.option("-n", "--namespace", default=default, show_default=default is not None,
                        callback=_name("namespace"), help=help)


def _aliases(ctx, param, values) -> dict[str, str]:
    from generator.container import programs

    known = [p.repository for p in programs.known().values()]
    out = {}
    for value in values:
        try:
            repo, target = programs.mapping(value, known)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        out[repo] = target
    return out


def image_option(fn):
    """--image REPO=host|DIR[:PATH]|KNOWN: the same image map for `cluster up` and `run`."""
    from generator.container.programs import CODE_PATH

    return click.option("--image", "aliases", multiple=True, metavar="REPO[:TAG]=host|DIR[:PATH]|KNOWN", callback=_aliases,
                        help="What images of REPO are here; repeatable. `run` takes every tag of "
                             "REPO: `host`, your own code, its command run by this machine's python, torchrun, bash and "
                             "sh on this machine's files; DIR[:PATH], the same, and the folder DIR is what the image "
                             f"holds at PATH (default: the container's workingDir, else {CODE_PATH}), so "
                             f"{CODE_PATH}/train.py is DIR/train.py and the container starts in DIR; KNOWN, a copy of a "
                             "known image (your build or mirror of the trainer). The real node pulls REPO:TAG (default "
                             "latest) from the registry on this machine, which `cluster up` gives DIR laid over REPO:TAG "
                             "from your engine's store, else over the torch runtime image, or a copy of KNOWN; `host` "
                             "is `run`'s alone (the node runs images).")(fn)


CHARTS = ("pytorchjob", "pytorch-operator")


def chart_option(fn):
    return click.option("--chart", type=click.Choice(CHARTS), default="pytorchjob", show_default=True,
                        help="Which chart the values are for: the job's or the operator's.")(fn)


def target_option(fn):
    return click.option("--target", type=click.Choice([kind.target for kind in kinds.ALL]), default=None,
                        help="Render a v1 PyTorchJob or a Trainer v2 TrainJob (default: the values' target, v1).")(fn)


def with_target(values: dict, target: str | None) -> dict:
    return {**values, "target": target} if target else values


def _registry_reader(ctx, param, value):
    """The file's logins, read before any job is (a bad file is refused first); None without it,
    and the commands ask registries without a login where a job needs it."""
    if value is None:
        return None
    from generator.images import distribution

    return distribution.Reader.from_option(value)


def registry_config_option(fn):
    return click.option("--registry-config", "reader", metavar="FILE", callback=_registry_reader,
                        help="Logins for the registries images are read from when a job leaves `command` to its image "
                             "(the config.json `docker login` writes). Without it: the registry on this machine, then "
                             "the image's own registry without a login.")(fn)


def output_option(fn):
    return click.option("-o", "--output", metavar="FILE",
                        help="Write to this file (atomically) instead of stdout.")(fn)


def format_option(fn):
    return click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
                        help="table for people, json for scripts.")(fn)


def legacy_output_format(output: str | None, fmt: str) -> tuple[str | None, str]:
    """`--output json|table|text` selected the format before 0.2; keep it working for a release."""
    if output in ("json", "table", "text"):
        chosen = "json" if output == "json" else "table"
        click.echo(f"warning: --output {output} is deprecated and will be removed; use --format {chosen}", err=True)
        return None, chosen
    return output, fmt


def cluster_options(fn):
    fn = click.option("--request-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
                      metavar="SECONDS", help="Give up on one API request after this long.")(fn)
    fn = click.option("--kubeconfig", metavar="FILE", help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")(fn)
    fn = click.option("--context", help="Kubeconfig context (default: the current one).")(fn)
    fn = namespace_option("Namespace (default: the context's).", default=None)(fn)
    return fn


def connect(context, namespace, kubeconfig, request_timeout=30.0):
    from generator.cluster import client

    c = client.connect(context, namespace, kubeconfig, request_timeout)
    c.on_wait = lambda text: click.echo(text, err=True)
    return c


def emit(text: str, output: str | None) -> None:
    from generator.files import write_atomic

    if output and output != "-":
        write_atomic(output, text)
    else:
        click.echo(text, nl=False)


def fail_if(findings: list[Finding], source: str) -> None:
    if findings:
        raise UserError(findings, source=source)
