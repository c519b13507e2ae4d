"""Options and output helpers every command spells the same way."""
from __future__ import annotations

import click

from generator.errors import Finding, UserError

DEFAULT_RELEASE = "release"


def _name(kind: str):
    """A click callback that refuses a name Helm or Kubernetes would refuse, before anything uses it
    (a release such as `--set=x` would otherwise become a flag of the helm command line)."""
    def check(ctx, param, value):
        from generator.job.admission import name_problem

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
    for value in values:
        repo, _, target = value.partition("=")
        if not repo or target not in known:
            raise click.BadParameter(f"{value!r}: write REPO=KNOWN, where KNOWN is one of {', '.join(known)}")
    return dict(value.split("=", 1) for value in values)


def image_option(fn):
    """--image REPO=KNOWN: the same image map for `cluster up` and `run`."""
    return click.option("--image", "aliases", multiple=True, metavar="REPO=KNOWN", callback=_aliases,
                        help="Run images of REPO as the known image KNOWN (your build or mirror of the trainer); "
                             "repeatable.")(fn)


CHARTS = ("pytorchjob", "pytorch-operator")


def chart_option(fn):
    return click.option("--chart", type=click.Choice(CHARTS), default="pytorchjob", show_default=True,
                        help="Which chart the values are for: the job's or the operator's.")(fn)


def target_option(fn):
    return click.option("--target", type=click.Choice(["v1", "v2"]), default=None,
                        help="Render a v1 PyTorchJob or a Trainer v2 TrainJob (default: the values' target, v1).")(fn)


def with_target(values: dict, target: str | None) -> dict:
    return {**values, "target": target} if target else values


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

    return client.connect(context, namespace, kubeconfig, request_timeout)


def emit(text: str, output: str | None) -> None:
    from generator.job.values_io import write_atomic

    if output and output != "-":
        write_atomic(output, text)
    else:
        click.echo(text, nl=False)


def fail_if(findings: list[Finding], source: str) -> None:
    if findings:
        raise UserError(findings, source=source)
