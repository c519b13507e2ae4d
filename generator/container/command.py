"""What a container's command line, env and working folder become on this machine, for a program
that runs on this machine's filesystem (the trainer): command and args combined with the image's
ENTRYPOINT and `$(VAR)` expanded as Kubernetes does, then volume mount paths written as their
folders. `generator run` and the process node both call `on_host`, so both start the same argv."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from generator.container.env import expand

ENTRYPOINT = ("python", "-m", "trainer")  # the trainer image's ENTRYPOINT
IMAGE_OUTPUT = "/opt/pytorch/output"  # where it writes without OUTPUT_DIR (trainer/config.py's default)


def command_line(entrypoint: tuple[str, ...] | list[str], container: dict, env: dict[str, str]) -> list[str]:
    """command (else the image's ENTRYPOINT) then args, each `$(VAR)` expanded against the container's env."""
    command = container.get("command") or list(entrypoint)
    return [expand(str(a), env) for a in [*command, *(container.get("args") or [])]]


def interpreter(argv: list[str]) -> list[str]:
    """python and torchrun become this interpreter, so the trainer runs with the packages it was
    installed with."""
    head = argv[0]
    if head in ("python", "python3") or head.startswith("python3."):
        return [sys.executable] + argv[1:]
    if head == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run"] + argv[1:]
    return list(argv)


def map_path(value: str, mounts: dict[str, Path]) -> str:
    """Container paths under a mount point become the local folder, in args and env alike."""
    for container_path in sorted(mounts, key=len, reverse=True):
        local = str(mounts[container_path])
        if value == container_path or value.startswith(container_path + "/"):
            return local + value[len(container_path):]
        for sep in ("=", ":"):  # --output-dir=/opt/pytorch/output, PATHS=a:/data/x
            marker = sep + container_path
            if marker in value:
                head, _, tail = value.partition(marker)
                if not tail or tail.startswith("/"):
                    return head + sep + local + tail
    return value


def own_output(env: dict[str, str], mounts: dict[str, Path], own: Path) -> None:
    """The trainer writes to OUTPUT_DIR, else to the image's /opt/pytorch/output, whatever command
    starts it (`python -m trainer`, torchrun). Unset, it becomes the volume mounted there, else a
    folder of the pod's own; a path on the container's own disk (OUTPUT_DIR where no volume is)
    becomes that folder too: never a path of this machine outside the run."""
    output = env.get("OUTPUT_DIR")
    if output is None:
        mapped = map_path(IMAGE_OUTPUT, mounts)
        env["OUTPUT_DIR"] = mapped if mapped != IMAGE_OUTPUT else str(own)
    elif output.startswith("/") and not any(output.startswith(str(f)) for f in mounts.values()):
        env["OUTPUT_DIR"] = str(own)


@dataclass(frozen=True)
class HostCommand:
    argv: list[str]
    env: dict[str, str]
    cwd: Path | None  # None: the caller's own choice (the shell's folder for `run`, the pod's for the node)


def on_host(entrypoint: tuple[str, ...] | list[str], container: dict, env: dict[str, str], mounts: dict[str, Path],
            own: Path, given: dict[str, str] | None = None) -> HostCommand:
    """The container as a process on this machine's filesystem. `env` is the container's resolved
    env; `given`: what of it the runtime set (paths of this machine, never mapped unless the pod
    overrode them); `mounts`: mountPath -> folder; `own`: the pod's own folder for what the
    container's disk would hold. Paths map after expansion, as the values would be seen inside
    the container, and before the interpreter goes in: a mount at /work must not move this
    machine's python."""
    argv = interpreter([map_path(a, mounts) for a in command_line(entrypoint, container, env)])
    given = given or {}
    mapped = {k: v if given.get(k) == v else map_path(v, mounts) for k, v in env.items()}
    own_output(mapped, mounts, own / "output")
    cwd = None
    if container.get("workingDir"):
        folder = map_path(container["workingDir"], mounts)
        # Not under a volume: a folder on the container's own disk, which is the pod's here.
        cwd = Path(folder) if folder != container["workingDir"] else own / "workdir" / folder.lstrip("/")
    return HostCommand(argv, mapped, cwd)
