"""Each pod as a process of this machine: its image one this machine runs as a program (the trainer
and its copies, or your code under `--image`), its env resolved as the kubelet does over the
program's own, its volumes as folders, and every pod at loopback on ports free now."""
from __future__ import annotations

import os
from pathlib import Path

from generator.container import machine, programs
from generator.container.command import NoCommand, PathError, on_host
from generator.container.env import ConfigError, ShellSources, container_env
from generator.container.ports import free_port
from generator.container.process import Process
from generator.errors import Finding
from generator.local.backends.base import Backend
from generator.local.plan import DISKS, Plan, Replica
from generator.local.pods import Placement, Pod, as_pod

PASSED_THROUGH = ("HOME", "TMPDIR", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES")


def process_env(replica: Replica, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The replica's env (the image's ENV with the pod's over it, as the plan resolved them) and, of
    this shell, only what a node would also give: a home, a temp folder, the locale, the GPUs it may use."""
    shell = os.environ if environ is None else environ
    return {**{k: v for k, v in shell.items() if k in PASSED_THROUGH}, **replica.env}


class Processes(Backend):
    """`aliases`: REPO -> the known image it is a copy of (--image)."""

    def __init__(self, aliases: dict[str, str] | None = None):
        self.aliases = aliases

    def address(self, dns: str) -> str:
        return "127.0.0.1"  # every pod shares this machine's loopback

    def port(self, cluster_port: int) -> int:
        return free_port()  # each pod has its own address on a cluster; here they share one

    def replica(self, pod: Pod, container: dict, injected: dict[str, str], mounts: dict[str, Path],
                placement: Placement, cwhere: str) -> Replica:
        """A pod as a process: its container's command and its env with `injected` over it."""
        run_dir, problems = placement.run_dir, placement.problems
        problems_here: list[Finding] = []
        program = _check_image(container.get("image", ""), self.aliases, f"{cwhere}.image", problems_here)
        # As the kubelet resolves them: $(VAR), the downward API; Secrets from this shell.
        resolved = as_pod(pod, placement.namespace, injected)
        container = next(c for c in resolved["spec"]["containers"] if c.get("name") == pod.main)
        sources = ShellSources(cwhere)
        program = program or programs.of("trainer")  # refused already: the rest is still checked, as the trainer
        try:
            # The image's ENV under the pod's, as the node builds it; the node's own additions are the README's differences.
            env = container_env(resolved, container, program.env(), sources, machine.allocatable())
            code = program.code_at(container)
            # Started elsewhere than the shell's folder, the process must find a relative run folder all the same.
            moved = bool(code or container.get("workingDir"))
            host = on_host(program.entrypoint, container, env, {k: v.absolute() for k, v in mounts.items()} if moved else mounts,
                           (run_dir / DISKS / pod.name).absolute() if moved else run_dir / DISKS / pod.name, program.env(),
                           code)
        except ConfigError as exc:
            problems_here.append(Finding(f"{cwhere}.env", str(exc),
                                         hint="use a value, a fieldRef the downward API offers, or a Secret or ConfigMap key"))
            host = None
        except PathError as exc:
            problems_here.append(Finding(f"{cwhere}.{exc.field}", str(exc)))
            host = None
        except NoCommand as exc:
            problems_here.append(Finding(f"{cwhere}.command", f"{exc} ({program.repository} runs as {program.what})",
                                         container.get("image"),
                                         hint="write the command the image would run, e.g. [python, /workspace/train.py]"))
            host = None
        problems.extend(p for p in [*problems_here, *sources.problems] if p not in problems)  # once per spec, not per replica
        if host is None:
            return Replica(pod.name, pod.role, pod.rank, pod.restart_policy, [], {}, mounts)
        return Replica(pod.name, pod.role, pod.rank, pod.restart_policy, host.argv, host.env, mounts, host.cwd)

    def folders(self, replica: Replica) -> set[str]:
        # The process's OUTPUT_DIR is a folder of this machine, mapped or not.
        return super().folders(replica) | ({replica.env["OUTPUT_DIR"]} if "OUTPUT_DIR" in replica.env else set())

    def launch(self, plan: Plan, replica: Replica, line) -> Process:
        return Process(replica.argv, process_env(replica), line, cwd=replica.cwd, isolate=True)


def _check_image(image: str, aliases: dict[str, str] | None, where: str,
                 problems: list[Finding]) -> programs.Program | None:
    """The image map of `--image`: the trainer image, a copy of it, or your own code
    (`--image REPO=host` or `REPO=DIR[:PATH]`); None, with a finding, for what this machine cannot run."""
    trainer = programs.of("trainer").repository
    repo = programs.repository(image)
    try:
        program = programs.resolve(image, aliases)
    except programs.ImagePullError as exc:
        if repo in (aliases or {}):  # mapped, to what is not here (a folder removed since)
            problems.append(Finding(where, str(exc), image))
            return None
        program = None
    if program is not None and program.mode == programs.HOST:
        return program
    what = "is not an image this machine has" if program is None else f"is the {program.role} image, not a training one"
    problems.append(Finding(where, what, image, hint=f"for your own code pass {programs.own_code(repo)}; "
                                                     f"`--image {repo}={trainer}` if it is a build of the trainer (its "
                                                     "python runs this checkout)"))
    return None
