"""How one container starts on this machine: the image's program, in the pod's network namespace,
with the pod's resolver mounted at /etc/hosts in a private mount namespace, and the volumes either mounted at their mountPaths (the
operator, whose paths are compiled in, and shell images) or written into the command line and
env as folders (the trainer and your own code, exactly as `generator run` does; a user image's
code folder is also mounted read-only where the image holds it, for code that names its own
files)."""
from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator.container import programs
from generator.container.command import NoCommand, command_line, on_host
from generator.container.process import Process

# Mount points a private namespace can create: these two get fresh tmpfs, as a container's own
# /tmp and /run. Anywhere else a mountPath must already be a folder on this machine.
PRIVATE_ROOTS = ("/tmp", "/var/run")
SHM = "/dev/shm"


class StartError(Exception):
    """The kubelet's RunContainerError: the container could not be created."""


def _unshare() -> list[str]:
    # Unprivileged, a user namespace allows the mounts.
    return ["unshare", "--mount", "--uts", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])


TOOLBOX = "/var/run/pod/bin"  # where a shell image finds the kubelet's nslookup


def mount_script(hostname: str, hosts: Path, mounts: list[tuple[Path, str, bool]] | None, binary: Path | None,
                 toolbox: Path | None, argv: list[str], code: tuple[str, Path] | None = None,
                 cwd: Path | None = None) -> str:
    """A shell script that builds the container's view and execs its program: the pod's hostname
    (torchrun's c10d rendezvous knows its host by it), its /etc/hosts, and, with `mounts` None
    only /etc/hosts changes (and `code`, (PATH, DIR), is mounted read-only at PATH, then the
    script enters `cwd` anew, which may lie in it); otherwise /tmp and /var/run are the
    container's own (fresh tmpfs) and each volume is mounted at its mountPath. Sources pass
    through a staging tmpfs first because a source may itself live under /tmp, which a tmpfs then
    hides."""
    q = shlex.quote
    lines = ["set -e", f"printf %s {q(hostname)} > /proc/sys/kernel/hostname", f"mount --bind {q(str(hosts))} /etc/hosts"]
    if code:
        lines += [f"mount --bind {q(str(code[1]))} {q(code[0])}", f"mount -o remount,bind,ro {q(code[0])}"]
        if cwd:
            lines.append(f"cd {q(str(cwd))}")
    if mounts is not None:
        mounts = list(mounts)
        lines += ["mount -t tmpfs pod-run /var/run", "mkdir -p /var/run/pod"]
        for i, (source, _, _) in enumerate(mounts):
            make = f"mkdir /var/run/pod/{i}" if source.is_dir() else f": > /var/run/pod/{i}"
            lines += [make, f"mount --bind {q(str(source))} /var/run/pod/{i}"]
        if binary:
            lines += [": > /var/run/pod/exe", f"mount --bind {q(str(binary))} /var/run/pod/exe"]
            argv = ["/var/run/pod/exe", *argv[1:]]
        if toolbox:
            lines += [f"mkdir {TOOLBOX}", f"mount --bind {q(str(toolbox))} {TOOLBOX}"]
        if not any(target == "/tmp" for _, target, _ in mounts):
            lines.append("mount -t tmpfs pod-tmp /tmp")
        order = sorted(range(len(mounts)), key=lambda i: mounts[i][1].count("/"))  # parents before children
        for i in order:
            source, target, read_only = mounts[i]
            lines.append(f"mkdir -p {q(target)}" if source.is_dir() else f"touch {q(target)}")
            lines.append(f"mount --bind /var/run/pod/{i} {q(target)}")
            if read_only:
                lines.append(f"mount -o remount,bind,ro {q(target)}")
    lines.append("exec " + shlex.join(argv))
    return "\n".join(lines)


def binaries() -> dict[str, Path]:
    """The built programs images stand for: the control plane's build knows where they are."""
    from generator.controlplane import build

    return {"operator": build.binary(build.OPERATOR_BINARY)}


@dataclass
class Prepared:
    """A container as it will start, before anything starts: what the parity test compares with `generator run`."""
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: list[tuple[Path, str, bool]] | None  # (folder, mountPath, read-only); None: written into argv and env
    binary: Path | None = None
    code: tuple[str, Path] | None = None  # a user image's (PATH, DIR), mounted read-only at PATH


def prepare(program: programs.Program, container: dict, env: dict[str, str], volumes: dict[str, Path],
            workdir: Path, given: dict[str, str] | None = None) -> Prepared:
    """The container's argv, env, folder and mounts on this machine; raises StartError for what cannot start."""
    argv = command_line(program.entrypoint, container, env)
    mounts: list[tuple[Path, str, bool]] = []
    for mount in container.get("volumeMounts") or []:
        source = volumes.get(mount["name"])
        if source is None:
            raise StartError(f'volumeMount "{mount["name"]}" names no volume of the pod')
        if mount.get("subPath"):
            # A link the pod left in its volume must not take the mount out of it (a known escape).
            within = (source / mount["subPath"]).resolve()
            if within != source.resolve() and source.resolve() not in within.parents:
                raise StartError(f'subPath "{mount["subPath"]}" of volumeMount "{mount["name"]}" leads out of the volume')
            source = within
            source.mkdir(parents=True, exist_ok=True)
        mounts.append((source, mount["mountPath"], bool(mount.get("readOnly"))))
    env = {**env}
    if program.mode == programs.HOST:
        # The trainer and user code see their volumes as folders named in their args and env, the same code as
        # `generator run`.
        code = program.code_at(container)
        try:
            host = on_host(program.entrypoint, container, env, {t: s for s, t, _ in mounts if t != SHM}, workdir.parent,
                           given, code, code_mounted=True)
        except NoCommand as exc:
            raise StartError(f"container {container.get('name')} {exc} ({program.repository} runs as {program.what}); "
                             "write the command in the pod spec") from None
        return Prepared(host.argv, host.env, host.cwd or workdir, None, code=code)
    # Other images get their volumes mounted where they expect them, in their own mount namespace.
    binary = None
    if program.mode == programs.SHELL:
        env["PATH"] = f"{TOOLBOX}:{env.get('PATH', '/usr/bin:/bin')}"
    elif argv[0] != program.entrypoint[0]:
        raise StartError(f"{argv[0]} is not in image {program.repository}, whose program is {program.entrypoint[0]}")
    else:
        binary = program.binary
    for _, target, _ in mounts:
        if not target.startswith(tuple(r + "/" for r in PRIVATE_ROOTS) + PRIVATE_ROOTS) and not Path(target).is_dir():
            raise StartError(f'mountPath "{target}" is not a folder on this machine and not under '
                             f"{' or '.join(PRIVATE_ROOTS)}, so this process node cannot mount there")
    return Prepared(argv, env, workdir, mounts, binary)


def _mount_point(path: str) -> None:
    """Where a user image's code folder mounts: a folder of this machine, made (empty) where it is
    missing, as a runtime makes a mount point in an image."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartError(f"cannot make the mount point {path} for the image's code folder: {exc}") from None
    if not Path(path).is_dir():
        raise StartError(f"{path}, where the image's code folder mounts, is not a folder on this machine")


def start(program: programs.Program, container: dict, env: dict[str, str], volumes: dict[str, Path], hostname: str,
          hosts: Path, workdir: Path, toolbox: Path, netns: Path | None, on_line: Callable[[str], None],
          given: dict[str, str] | None = None) -> Process:
    """The container's process, in the pod's network namespace `netns` (None: this machine's);
    `given`: what of `env` the node set rather than the pod."""
    ready = prepare(program, container, env, volumes, workdir, given)
    # A folder in the code mount exists only once the mount is made: start in the pod's and enter it there.
    inside = ready.code is not None and ready.cwd.is_relative_to(ready.code[0])
    if ready.code:
        _mount_point(ready.code[0])
    launch = workdir if inside else ready.cwd
    launch.mkdir(parents=True, exist_ok=True)
    shell = program.mode == programs.SHELL
    joined = ["nsenter", f"--net={netns}"] if netns else []
    script = mount_script(hostname, hosts, ready.mounts, ready.binary, toolbox if shell else None, ready.argv,
                          ready.code, ready.cwd if inside else None)
    try:
        return Process([*joined, *_unshare(), "sh", "-c", script], ready.env, on_line, cwd=launch)
    except OSError as exc:
        raise StartError(f"cannot start {ready.argv[0]}: {exc}") from exc
