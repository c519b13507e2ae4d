"""What a container's command line, env and working folder become on this machine, for a program
that runs on this machine's filesystem (the trainer, your own code): command and args combined
with the image's ENTRYPOINT and `$(VAR)` expanded as Kubernetes does, then volume mount paths
(and a user image's code folder) written as their folders, in a shell's `-c` script too.
`generator run` calls `on_host` for every replica it starts."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from generator.container.env import expand
from trainer.config import DEFAULT_OUTPUT_DIR as IMAGE_OUTPUT
from trainer.config import OUTPUT_ENV

ENTRYPOINT = ("python", "-m", "trainer")  # the trainer image's ENTRYPOINT (trainer/Dockerfile's; a test holds them equal)
# A pod's shared-memory mount: on this machine the process has the machine's own, so it is no folder to map.
SHM = "/dev/shm"


def command_line(entrypoint: tuple[str, ...] | list[str], container: dict, env: dict[str, str]) -> list[str]:
    """command (else the image's ENTRYPOINT) then args, each `$(VAR)` expanded against the container's env."""
    command = container.get("command") or list(entrypoint)
    return [expand(str(a), env) for a in [*command, *(container.get("args") or [])]]


def interpreter(argv: list[str]) -> list[str]:
    """python and torchrun (by name, or at the image's path for them such as /opt/conda/bin/python)
    become this interpreter, so the code runs with the packages the tool was installed with."""
    head = argv[0].rsplit("/", 1)[-1]
    if head in ("python", "python3") or re.fullmatch(r"python3\.\d+", head):
        return [sys.executable] + argv[1:]
    if head == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run"] + argv[1:]
    return list(argv)


SHELLS = ("sh", "bash", "dash", "ash")


def script_index(argv: list[str]) -> int | None:
    """Where a shell's `-c` script is in argv (`bash -c`, `sh -ec`, `/bin/bash -xc` ...), else None."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    args = iter(enumerate(argv[1:], 1))
    for i, arg in args:
        if arg in ("-o", "+o"):  # -o pipefail: the option's name follows
            next(args, None)
            continue
        if not arg.startswith(("-", "+")) or arg.startswith("--"):
            return None  # a script file, or a long option before any -c
        if "c" in arg[1:]:
            return i + 1 if i + 1 < len(argv) else None
    return None


def map_text(text: str, mounts: dict[str, Path]) -> str:
    """Mount paths as words of a shell script (and of the heredocs in it) become their folders:
    `/data`, `/data/x`, `"/data"`, `--out=/data`, never `/database` or `./data`."""
    if not mounts:
        return text
    paths = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w./-])({paths})(?=$|[/\s'\"`;:,)|&<>}}])", re.MULTILINE)
    return pattern.sub(lambda m: str(mounts[m.group(1)]), text)


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
    output = env.get(OUTPUT_ENV)
    if output is None:
        mapped = map_path(IMAGE_OUTPUT, mounts)
        env[OUTPUT_ENV] = mapped if mapped != IMAGE_OUTPUT else str(own)
    elif output.startswith("/") and not any(output.startswith(str(f)) for f in mounts.values()):
        env[OUTPUT_ENV] = str(own)


@dataclass(frozen=True)
class HostCommand:
    argv: list[str]
    env: dict[str, str]
    cwd: Path | None  # None: the caller's own choice (the shell's folder for `run`, the pod's for the node)


class NoCommand(Exception):
    """A user image's container sets no command, and its ENTRYPOINT is not known on this machine."""


class PathError(ValueError):
    """A path in the container spec that would lead out of where it belongs (`..`), or hide what
    the container needs: refused before anything is made or started. `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def container_path(field: str, value: str) -> str:
    """`value` (workingDir, a mountPath) as one absolute path: `.` and repeated slashes gone, `..`
    refused. Joined under a folder of this machine, a `..` would climb out of it, and the node
    makes these folders as root."""
    if ".." in value.split("/"):
        raise PathError(field, f'{field} is "{value}", which contains "..": refused, as it would lead out of the '
                               "pod's own folders; write the path without '..'")
    return "/" + "/".join(part for part in value.split("/") if part not in ("", "."))


def on_host(entrypoint: tuple[str, ...] | list[str], container: dict, env: dict[str, str], mounts: dict[str, Path],
            own: Path, given: dict[str, str] | None = None, code: tuple[str, Path] | None = None,
            code_mounted: bool = False) -> HostCommand:
    """The container as a process on this machine's filesystem. `env` is the container's resolved
    env; `given`: what of it the runtime set (paths of this machine, never mapped unless the pod
    overrode them); `mounts`: mountPath -> folder; `own`: the pod's own folder for what the
    container's disk would hold; `code`: (PATH, DIR) of a user image whose files are DIR, where
    it starts unless workingDir says otherwise: written in DIR's place like a volume, or, when
    `code_mounted` (the node mounts DIR at PATH), left as PATH. Paths map after expansion, as the
    values would be seen inside the container, and before the interpreter goes in: a mount at
    /work must not move this machine's python."""
    if not entrypoint and not container.get("command"):
        raise NoCommand("sets no command, and this machine does not know the image's ENTRYPOINT")
    if code and not code_mounted and code[0] not in mounts:  # the image's files are a folder here, as a volume's are
        mounts = {**mounts, code[0]: code[1]}
    argv = command_line(entrypoint, container, env)
    script = script_index(argv)
    argv = interpreter([map_text(a, mounts) if i == script else map_path(a, mounts) for i, a in enumerate(argv)])
    given = given or {}
    mapped = {k: v if given.get(k) == v else map_path(v, mounts) for k, v in env.items()}
    if entrypoint:  # the trainer's OUTPUT_DIR contract; your code's variables are yours
        own_output(mapped, mounts, own / "output")
    start = container.get("workingDir") and container_path("workingDir", container["workingDir"])
    start = start or (code[0] if code else None)
    if not start:
        return HostCommand(argv, mapped, None)
    folder = map_path(start, mounts)
    if folder != start:  # under a volume, or the code's folder written as DIR
        return HostCommand(argv, mapped, Path(folder))
    if code and (start == code[0] or start.startswith(code[0].rstrip("/") + "/")):
        return HostCommand(argv, mapped, Path(start))  # inside the code the node mounts
    # Not under a volume: a folder on the container's own disk, which is the pod's here.
    return HostCommand(argv, mapped, own / "workdir" / folder.lstrip("/"))
