"""How one container starts on this machine: the image's program, in the pod's network namespace,
with the pod's resolver mounted at /etc/hosts in a private mount namespace, and the volumes either mounted at their mountPaths (the
operator, whose paths are compiled in, and shell images) or written into the command line and
env as folders (the trainer, exactly as `generator run` does)."""
from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator.container import programs
from generator.container.command import command_line, on_host
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


TOOLBOX = "/var/run/pod/bin"
RELOCATED = "/var/run/pod/files"  # where a file mounted at a path this machine lacks goes  # where a shell image finds the kubelet's nslookup


def mount_script(hostname: str, hosts: Path, mounts: list[tuple[Path, str, bool]] | None, binary: Path | None,
                 toolbox: Path | None, argv: list[str]) -> str:
    """A shell script that builds the container's view and execs its program: the pod's hostname
    (torchrun's c10d rendezvous knows its host by it), its /etc/hosts, and, with `mounts` None
    only /etc/hosts changes; otherwise /tmp and /var/run are the container's own (fresh tmpfs) and
    each volume is mounted at its mountPath. Sources pass through a staging tmpfs first because a
    source may itself live under /tmp, which a tmpfs then hides."""
    q = shlex.quote
    lines = ["set -e", f"printf %s {q(hostname)} > /proc/sys/kernel/hostname", f"mount --bind {q(str(hosts))} /etc/hosts"]
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
            if target.startswith(RELOCATED + "/"):
                lines.append(f"mkdir -p {q(str(Path(target).parent))}")
            lines.append(f"mkdir -p {q(target)}" if source.is_dir() else f"touch {q(target)}")
            lines.append(f"mount --bind /var/run/pod/{i} {q(target)}")
            if read_only:
                lines.append(f"mount -o remount,bind,ro {q(target)}")
    lines.append("exec " + shlex.join(argv))
    return "\n".join(lines)


def binaries() -> dict[str, Path]:
    """The built programs images stand for: the control plane's build knows where they are."""
    from generator.controlplane import build

    return {"operator": build.binary(build.OPERATOR_BINARY), "trainer-controller": build.binary(build.TRAINER_BINARY),
            "jobset": build.binary(build.JOBSET_BINARY)}


def upstream() -> dict[str, str]:
    """The images of upstream's Trainer and JobSet charts, by role."""
    from generator.controlplane import trainer_release

    return trainer_release.images()


@dataclass
class Prepared:
    """A container as it will start, before anything starts: what the parity test compares with `generator run`."""
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: list[tuple[Path, str, bool]] | None  # (folder, mountPath, read-only); None: written into argv and env
    binary: Path | None = None


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
            if not source.is_file():  # a key of a Secret or ConfigMap volume is a file; else a folder is made
                source.mkdir(parents=True, exist_ok=True)
        mounts.append((source, mount["mountPath"], bool(mount.get("readOnly"))))
    env = {**env}
    if program.mode == programs.HOST:
        # The trainer sees its volumes as folders named in its args and env, the same code as `generator run`.
        host = on_host(program.entrypoint, container, env, {t: s for s, t, _ in mounts if t != SHM}, workdir.parent,
                       given)
        return Prepared(host.argv, host.env, host.cwd or workdir, None)
    # Other images get their volumes mounted where they expect them, in their own mount namespace.
    binary = None
    if program.mode == programs.SHELL:
        env["PATH"] = f"{TOOLBOX}:{env.get('PATH', '/usr/bin:/bin')}"
    elif argv[0] != program.entrypoint[0]:
        raise StartError(f"{argv[0]} is not in image {program.repository}, whose program is {program.entrypoint[0]}")
    else:
        binary = program.binary
    for i, (source, target, read_only) in enumerate(mounts):
        if not _mountable(target) and _named(target, argv):
            # A path the program is told of that this machine lacks (Trainer's and JobSet's
            # `--config=/controller_manager_config.yaml`, the runtimes installer's /manifests): mounted
            # in the container's own /var/run instead, and its command line says so there.
            moved = f"{RELOCATED}{target}"
            argv = [_named(target, [a], moved) or a for a in argv]
            mounts[i] = (source, moved, read_only)
    for _, target, _ in mounts:
        if not _mountable(target):
            raise StartError(f'mountPath "{target}" is not a folder on this machine and not under '
                             f"{' or '.join(PRIVATE_ROOTS)}, so this process node cannot mount there")
    return Prepared(argv, env, workdir, mounts, binary)


def _mountable(target: str) -> bool:
    """Whether a private mount namespace can mount at `target` without creating it on this machine."""
    return target.startswith(tuple(r + "/" for r in PRIVATE_ROOTS) + PRIVATE_ROOTS) or Path(target).is_dir()


def _named(target: str, argv: list[str], moved: str | None = None) -> str:
    """The first argument naming `target` as a whole path (alone, after `=`, or inside a script),
    with `target` written as `moved` when given; '' when none names it."""
    import re

    pattern = re.compile(rf"(?<![\w./-]){re.escape(target)}(?=[/\s\"':;]|$)")
    for arg in argv:
        if pattern.search(arg):
            return pattern.sub(moved, arg) if moved is not None else arg
    return ""


def start(program: programs.Program, container: dict, env: dict[str, str], volumes: dict[str, Path], hostname: str,
          hosts: Path, workdir: Path, toolbox: Path, netns: Path | None, on_line: Callable[[str], None],
          given: dict[str, str] | None = None) -> Process:
    """The container's process, in the pod's network namespace `netns` (None: this machine's);
    `given`: what of `env` the node set rather than the pod."""
    ready = prepare(program, container, env, volumes, workdir, given)
    ready.cwd.mkdir(parents=True, exist_ok=True)
    shell = program.mode == programs.SHELL
    joined = ["nsenter", f"--net={netns}"] if netns else []
    script = mount_script(hostname, hosts, ready.mounts, ready.binary, toolbox if shell else None, ready.argv)
    try:
        return Process([*joined, *_unshare(), "sh", "-c", script], ready.env, on_line, cwd=ready.cwd)
    except OSError as exc:
        raise StartError(f"cannot start {ready.argv[0]}: {exc}") from exc
