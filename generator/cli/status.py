"""`status`: a job's state, replicas, conditions and progress."""
from __future__ import annotations

import json

import click

from generator.cli.common import cluster_options, connect, emit, format_option, legacy_output_format


@click.command("status")
@click.argument("name")
@format_option
@click.option("-o", "--output", metavar="FILE", help="Write the report to this file (atomically) instead of stdout.")
@cluster_options
def command(name, fmt, output, context, namespace, kubeconfig, request_timeout) -> None:
    """Conditions, replica counts, times and progress (percent done, time left, loss, accuracy) of a job."""
    from generator.cluster import ops
    from generator.diagnose import hint
    from generator.diagnose import report as findings

    output, fmt = legacy_output_format(output, fmt)
    c = connect(context, namespace, kubeconfig, request_timeout)
    report = ops.status(c, name)
    top = hint.top(c, name)
    report["diagnosis"] = top.as_dict() if top else None
    text = table(report) + (f"diagnose: {findings.one_line(top)}\n" if top else "")
    emit(json.dumps(report, indent=2) + "\n" if fmt == "json" else text, output)


def table(r: dict) -> str:
    from generator import kinds
    from generator.cluster import progress

    kind = kinds.get(r["kind"])  # it counts its replicas' pods, or its child Jobs
    unit = kind.replica_unit
    lines = [f"{r['kind']} {r['name']} (namespace {r['namespace']}): {r['state']}",
             f"{kind.start_word}: {r['startTime'] or '-'}   "
             f"completed: {r['completionTime'] or '-'}"]
    if r.get("progress") or r["state"] == "Running":
        lines.append(progress.one_line(r.get("progress")))
    lines.append(f"{unit:<10}{'ACTIVE':>8}{'SUCCEEDED':>11}{'FAILED':>8}")
    for role, counts in sorted(r["replicas"].items()):
        lines.append(f"{role:<10}{counts['active']:>8}{counts['succeeded']:>11}{counts['failed']:>8}")
    lines.append(f"{'CONDITION':<12}{'STATUS':<8}{'REASON':<28}{'SINCE':<22}MESSAGE")
    for cond in r["conditions"]:
        lines.append(f"{cond['type'] or '':<12}{cond['status'] or '':<8}{cond['reason'] or '':<28}"
                     f"{cond['lastTransitionTime'] or '':<22}{cond['message'] or ''}")
    if r["reason"] or r["message"]:
        lines.append(f"last: {r['reason']}: {r['message']}")
    return "\n".join(lines) + "\n"
