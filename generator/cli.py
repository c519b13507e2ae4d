"""`python -m generator`: job descriptions to validated values, manifests, local runs and cluster jobs.

Exit status: 0 success, 1 invalid input or a failed job, 2 usage. Errors name the field, the
value and a fix, without a traceback unless --debug is given."""
from __future__ import annotations

import json
import sys

import click

from .errors import UserError

RELEASE_HELP = "Helm release name (the default job name is <release>-pytorchjob)"


class _Cli(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: {exc.describe()}", err=True)
            ctx.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # a bug: still no traceback for the user
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: internal error ({type(exc).__name__}: {exc}); rerun with --debug and report it", err=True)
            ctx.exit(1)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of short error messages.")
@click.version_option(package_name="pytorchjob-kit")
def cli(debug: bool) -> None:
    """Validated PyTorchJobs for the Kubeflow training operator, from a short description to a running job."""


def _emit(text: str, output: str | None) -> None:
    from .values_io import write_atomic

    if output and output != "-":
        write_atomic(output, text)
    else:
        click.echo(text, nl=False)


def _fail_if(findings, source: str) -> None:
    if findings:
        raise UserError(findings, source=source)


@cli.command("values")
@click.option("-f", "--values", "base", metavar="FILE", help="Start from this values file.")
@click.option("--name", help="Job name (DNS-1035 label).")
@click.option("--image", help="Image: REPOSITORY[:TAG][@sha256:DIGEST].")
@click.option("--workers", type=click.IntRange(min=0), help="Workers besides the one Master (0: Master only).")
@click.option("--nproc-per-node", help="Processes per pod: auto, cpu, gpu or an integer (starts torchrun).")
@click.option("--gpus", type=click.IntRange(min=0), help="GPUs per pod.")
@click.option("--cpu", help="CPU request per pod, e.g. 2 or 500m.")
@click.option("--memory", help="Memory request per pod, e.g. 8Gi.")
@click.option("--cpu-limit", help="CPU limit per pod.")
@click.option("--memory-limit", help="Memory limit per pod.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), help="auto: nccl with GPUs, else gloo.")
@click.option("--output-pvc", metavar="NAME", help="Write outputs to this existing PVC.")
@click.option("--output-size", metavar="SIZE", help="Create an output PVC of this size, e.g. 10Gi.")
@click.option("--shm-size", metavar="SIZE", help="Size of the in-memory /dev/shm.")
@click.option("--toleration", "tolerations", multiple=True, metavar="KEY[=VALUE][:EFFECT]", help="Repeatable.")
@click.option("--node-selector", "node_selectors", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--env", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option("--env-from-secret", "env_from_secrets", multiple=True, metavar="SECRET", help="All keys of a Secret as env; repeatable.")
@click.option("--queue", help="Kueue LocalQueue.")
@click.option("--priority-class", help="PriorityClass of the pods.")
@click.option("--elastic", metavar="MIN:MAX", help="Elastic Workers between MIN and MAX.")
@click.option("--restart-policy", type=click.Choice(["Always", "OnFailure", "Never", "ExitCode"]))
@click.option("--backoff-limit", type=click.IntRange(min=0), help="Restarts before the job fails.")
@click.option("--ttl", type=click.IntRange(min=0), help="Seconds to keep the job after it ends.")
@click.option("--deadline", type=click.IntRange(min=1), help="Seconds the job may run.")
@click.option("--arg", "args", multiple=True, help="Trainer argument; repeatable (--arg=--epochs=3).")
@click.option("--set", "sets", multiple=True, metavar="PATH=VALUE", help="Any other chart value, as helm --set.")
@click.option("-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout.")
def values_cmd(base, sets, output, **flags) -> None:
    """Write values for charts/pytorchjob from a short job description."""
    from . import describe, validation, values_io

    base_values = values_io.load_mapping(base) if base else {}
    parsed_sets = [_parse_set(s) for s in sets]
    flags = {k: v for k, v in flags.items() if v not in (None, ())}
    description = describe.Description(sets=parsed_sets, **flags)
    values = describe.build(description, base_values)
    _fail_if(validation.check_values(values), "values")
    text = values_io.dump(values)
    _emit(text, output)
    click.echo(describe.summary(values), err=True)


def _parse_set(expression: str) -> dict:
    import helm_python

    try:
        return helm_python.parse_set_string(expression)
    except helm_python.HelmError as exc:
        raise UserError(f"--set {expression!r}: {exc}; write PATH=VALUE, e.g. --set runPolicy.suspend=true") from None


@cli.command("validate")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--release", default="", help=RELEASE_HELP + "; checks the default name's length.")
@click.option("--output", "fmt", type=click.Choice(["text", "json"]), default="text", help="json: findings for CI.")
def validate_cmd(files, release, fmt) -> None:
    """Check values files (or PyTorchJob manifests): the schema and every rule the operator and Kubernetes apply."""
    from . import job_source, validation, values_io

    report = []
    for path in files:
        try:
            documents = values_io.load_documents(path)
            if any(isinstance(d, dict) and d.get("kind") == "PyTorchJob" for d in documents):
                findings = validation.check_manifest(job_source.pick(documents, path))
            else:
                findings = validation.check_values(values_io.load_mapping(path), release)
        except UserError as exc:
            findings = exc.findings
        report.append({"file": path, "valid": not findings, "findings": [f.as_dict() for f in findings]})
        if fmt == "text":
            if findings:
                click.echo(UserError(findings, source=path).describe(), err=True)
            else:
                click.echo(f"{path}: valid")
    if fmt == "json":
        click.echo(json.dumps(report, indent=2, default=str))
    if not all(r["valid"] for r in report):
        sys.exit(1)


@cli.command("import")
@click.argument("manifest", metavar="MANIFEST")
@click.option("-o", "--output", metavar="FILE", help="Write the values here (atomically) instead of stdout.")
def import_cmd(manifest, output) -> None:
    """Turn an existing PyTorchJob manifest into values that render it back."""
    from . import importer, job_source, values_io

    job = job_source.pick(values_io.load_documents(manifest), manifest)
    values, notes = importer.to_values(job, source=manifest)
    _emit(values_io.dump(values), output)
    for note in notes:
        click.echo(f"note: {note}", err=True)


@cli.command("render")
@click.argument("values_file", metavar="VALUES")
@click.option("--release", default="release", show_default=True, help=RELEASE_HELP)
@click.option("--namespace", default="default", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write the manifests here (atomically) instead of stdout.")
def render_cmd(values_file, release, namespace, output) -> None:
    """Render the job's manifests with the real Helm engine."""
    from . import helm, paths, validation, values_io

    values = values_io.load_mapping(values_file)
    _fail_if(validation.check_values(values, release), values_file)
    _emit(helm.render_stream(paths.JOB_CHART, values, release, namespace), output)


@cli.command("run")
@click.argument("file", metavar="VALUES|MANIFEST")
@click.option("--release", default="local", show_default=True, help=RELEASE_HELP + " (values files only).")
@click.option("--namespace", default="default", show_default=True, help="Namespace the pods would see.")
@click.option("--run-dir", metavar="DIR", help="Where volumes map to (default: runs/<job>).")
@click.option("--dry-run", is_flag=True, help="Print the processes and their commands without starting them.")
def run_cmd(file, release, namespace, run_dir, dry_run) -> None:
    """Run a job on this machine exactly as the operator would run it on a cluster."""
    import signal
    from pathlib import Path

    from . import job_source, local_plan, local_run

    job = job_source.pytorchjob(job_source.load(file, release, namespace))
    plan = local_plan.plan(job, Path(run_dir or Path("runs") / job["metadata"]["name"]), namespace)
    click.echo(local_plan.describe(plan), err=True)
    for note in plan.notes:
        click.echo(f"note: {note}", err=True)
    if dry_run:
        return
    runner = local_run.Runner(plan)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: runner.request_stop(f"stopped by {signal.Signals(signum).name}"))
    outcome = runner.run()
    click.echo(local_run.summary(outcome, plan), err=True)
    if not outcome.succeeded:
        sys.exit(1)


def _register_cluster_commands() -> None:
    from . import cluster_cli

    cluster_cli.register(cli)


_register_cluster_commands()


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="python -m generator", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
