"""`values`: a short job description to chart values, validated and summarised."""
from __future__ import annotations

import click

from generator import kinds
from generator.cli.common import emit, fail_if, output_option, release_option, target_option
from generator.errors import UserError

# Every kind's policies, offered in the order the kinds list them; each target takes its kind's own.
RESTART_POLICIES = tuple(dict.fromkeys(p for k in kinds.ALL for p in k.restart_policies))


@click.command("values")
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
@click.option("--node-loss-toleration", type=click.IntRange(min=0), metavar="SECONDS",
              help="Seconds the pods stay bound to a node that stops answering before Kubernetes evicts them "
                   "(its default: 300; 0 evicts at once).")
@click.option("--node-selector", "node_selectors", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--env", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option("--env-from-secret", "env_from_secrets", multiple=True, metavar="SECRET", help="All keys of a Secret as env; repeatable.")
@click.option("--queue", help="Kueue LocalQueue.")
@click.option("--priority-class", help="PriorityClass of the pods.")
@click.option("--elastic", metavar="MIN:MAX", help="Elastic Workers between MIN and MAX.")
@click.option("--restart-policy", type=click.Choice(RESTART_POLICIES),
              help="The pods' restartPolicy: " + "; ".join(f"--target {k.target} ({k.kind}): {', '.join(k.restart_policies)}"
                                                            for k in kinds.ALL) + ".")
@click.option("--backoff-limit", type=click.IntRange(min=0), help="Restarts before the job fails.")
@click.option("--ttl", type=click.IntRange(min=0), help="Seconds to keep the job after it ends.")
@click.option("--deadline", type=click.IntRange(min=1), help="Seconds the job may run.")
@click.option("--arg", "args", multiple=True, help="Trainer argument; repeatable (--arg=--epochs=3).")
@click.option("--set", "sets", multiple=True, metavar="PATH=VALUE", help="Any other chart value, as helm --set.")
@target_option
@release_option
@output_option
def command(base, sets, release, output, **flags) -> None:
    """Write values for charts/pytorchjob from a short job description."""
    from generator.job import describe, validation, values_io

    base_values = values_io.load_mapping(base) if base else {}
    flags = {k: v for k, v in flags.items() if v not in (None, ())}
    description = describe.Description(sets=[_parse_set(s) for s in sets], **flags)
    values = describe.build(description, kinds.for_values, base_values)
    kind = kinds.for_values(values)
    _check_restart_policy(flags.get("restart_policy"), kind)
    checked = validation.check_values(values, kind, release)
    fail_if(checked.findings, f"{base} with the flags" if base else "values")
    emit(values_io.dump(values), output)
    said = kind.summary(values, checked, release)
    if said:
        click.echo(said, err=True)
    for warning in checked.warnings:  # valid all the same, as `validate` says
        click.echo(f"warning: {warning.render()}", err=True)


def _check_restart_policy(policy: str | None, kind) -> None:
    if policy is None or policy in kind.restart_policies:
        return
    takers = [f"--target {k.target}" for k in kinds.ALL if policy in k.restart_policies]
    raise click.BadParameter(f"{policy!r} is not a policy {kind.kind}s take (--target {kind.target}): use "
                             f"{' or '.join(kind.restart_policies)}, or {' or '.join(takers)} for {policy}",
                             param_hint="'--restart-policy'")


def _parse_set(expression: str) -> dict:
    import helm_python

    try:
        return helm_python.parse_set_string(expression)
    except helm_python.HelmError as exc:
        raise UserError(f"--set {expression!r}: {exc}; write PATH=VALUE, e.g. --set runPolicy.suspend=true") from None
