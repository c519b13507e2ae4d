"""How one container starts on this machine: the image's program, in the pod's network namespace,
with the pod's resolver mounted at /etc/hosts in a private mount namespace, and the volumes either mounted at their mountPaths (the
operator, whose paths are compiled in, and shell images) or written into the command line and
env as folders (the trainer and your own code, exactly as `generator run` does; a user image's
code folder is also mounted read-only where the image holds it, for code that names its own
files)."""
from __future__ import annotations

import ctypes
import json
import os
import posixpath
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator.container import programs
from generator.container.command import SHM, NoCommand, PathError, command_line, container_path, on_host
from generator.container.process import Process
from generator.controlplane.kubelet import enter, security

# Mount points a private namespace can create: these two get fresh tmpfs, as a container's own
# /tmp and /run. Anywhere else a mountPath must already be a folder on this machine.
PRIVATE_ROOTS = ("/tmp", "/var/run")


class StartError(Exception):
    """The kubelet's RunContainerError: the container could not be created."""


# The node's own environment for the processes it starts as root: no variable of the pod's
# (PATH, LD_PRELOAD, ...) reaches them; the container's env reaches only its program.
NODE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
ENTER = Path(__file__).with_name("enter.py")


TOOLBOX = "/var/run/pod/bin"
RELOCATED = "/var/run/pod/files"  # where a file mounted at a path this machine lacks goes  # where a shell image finds the kubelet's nslookup


@dataclass(frozen=True)
class Hidden:
    """The cluster's folder hidden inside the container (an empty tmpfs over it) but for `keep`,
    the pod's own folders bound back at their paths: a container sees no other pod's token and
    none of the cluster's keys, and a non-root user reaches its own folders although the
    cluster's folder is 0700 on the host."""
    root: Path
    keep: tuple[Path, ...]


def mount_steps(hostname: str, hosts: Path, mounts: list[tuple[Path, str, bool]] | None, binary: Path | None,
                toolbox: Path | None, argv: list[str], code: tuple[str, Path] | None = None,
                cwd: Path | None = None, hidden: Hidden | list[Hidden] | None = None,
                identity: security.Identity | None = None, launch: Path | None = None) -> tuple[list, dict[str, Path], list[str]]:
    """The steps enter.py takes to build the container's view, the sources it mounts (by name: the
    node opens each, and a step names it `@name`), and the argv it execs. With `mounts` None only
    /etc/hosts changes (and the cluster's folder, with `hidden`; `code`, (PATH, DIR), is mounted
    read-only at PATH, and the program starts in `cwd`, which may lie in it); otherwise /tmp and
    /var/run are the container's own (fresh tmpfs) and each volume is mounted at its mountPath,
    parents before children. With `identity` a read-only root is remounted so."""
    covers = _merged([hidden] if isinstance(hidden, Hidden) else hidden or [])
    kept = [folder for cover in covers for folder in cover.keep]
    sources: dict[str, Path] = {"hosts": hosts}
    steps: list = [["bind", "@hosts", "/etc/hosts", "file"]]
    if code:
        sources["code"] = code[1]
        steps.append(["bind", "@code", code[0], "dir", True])
    if mounts is not None or covers:
        steps += [["tmpfs", "pod-run", "/var/run"], ["mkdir", "/var/run/pod"]]
    if mounts is not None:
        if binary:
            sources["exe"] = binary
            steps.append(["bind", "@exe", "/var/run/pod/exe", "file"])
            argv = ["/var/run/pod/exe", *argv[1:]]
        if toolbox:
            sources["toolbox"] = toolbox
            steps.append(["bind", "@toolbox", TOOLBOX])
    if covers:
        for cover in covers:
            steps.append(["tmpfs", "hidden", str(cover.root), "mode=0755"])
        for j, folder in enumerate(kept):
            sources[f"keep-{j}"] = folder
            steps.append(["bind", f"@keep-{j}", str(folder)])
        if launch:
            steps.append(["chdir", str(launch)])  # the working folder as the container sees it, through its own mount
    if mounts is not None:
        if not any(target == "/tmp" for _, target, _ in mounts):
            steps.append(["tmpfs", "pod-tmp", "/tmp"])
        order = sorted(range(len(mounts)), key=lambda i: mounts[i][1].count("/"))  # parents before children
        for i in order:
            source, target, read_only = mounts[i]
            sources[f"volume-{i}"] = source
            steps.append(["bind", f"@volume-{i}", target, "dir" if source.is_dir() else "file", read_only, True])
    if identity and identity.read_only_root:
        # Writable stay the volumes and the pod's own folders (separate mounts); / and the
        # container's own /tmp and /var/run become read-only, as an image's root would.
        steps.append(["remount_ro", "/", True])
        if mounts is not None:
            if not any(target == "/tmp" for _, target, _ in mounts):
                steps.append(["remount_ro", "/tmp", False])
            steps.append(["remount_ro", "/var/run", False])
    if cwd:
        steps.append(["chdir", str(cwd)])  # a folder in the code's mount exists only now
    return steps, sources, argv


def binaries() -> dict[str, Path]:
    """The built programs images stand for: the control plane's build knows where they are."""
    from generator.controlplane import build

    return {"operator": build.binary(build.OPERATOR_BINARY), "trainer-controller": build.binary(build.TRAINER_BINARY),
            "jobset": build.binary(build.JOBSET_BINARY), "kueue": build.binary(build.KUEUE_BINARY)}


def upstream() -> dict[str, str]:
    """The images of upstream's Trainer, JobSet and Kueue charts, by role."""
    from generator.controlplane import kueue_release, trainer_release

    return {**trainer_release.images(), **kueue_release.images()}


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
        try:
            target = container_path(f'mountPath of volumeMount "{mount["name"]}"', mount["mountPath"])
        except PathError as exc:
            raise StartError(str(exc)) from None
        if target == "/" or target == "/proc" or target.startswith("/proc/"):
            raise StartError(f'mountPath "{mount["mountPath"]}" of volumeMount "{mount["name"]}" would cover '
                             f'{"/" if target == "/" else "/proc"}, which this node needs to build the container\'s '
                             "view; mount the volume at a folder of its own")
        if mount.get("subPath"):
            source = _sub_path(source, mount)
        mounts.append((source, target, bool(mount.get("readOnly"))))
    env = {**env}
    if program.mode == programs.HOST:
        # The trainer and user code see their volumes as folders named in their args and env, the same code as
        # `generator run`.
        try:
            code = program.code_at(container)
            host = on_host(program.entrypoint, container, env, {t: s for s, t, _ in mounts if t != SHM}, workdir.parent,
                           given, code, code_mounted=True)
        except NoCommand as exc:
            raise StartError(f"container {container.get('name')} {exc} ({program.repository} runs as {program.what}); "
                             "write the command in the pod spec") from None
        except PathError as exc:
            raise StartError(f"container {container.get('name')}: {exc}") from None
        return Prepared(host.argv, host.env, host.cwd or workdir, None, code=code)
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
        if not _mountable(target) and not (binary is not None and _makeable(program.role, target)):
            raise StartError(f'mountPath "{target}" is not a folder on this machine and not under '
                             f"{' or '.join(PRIVATE_ROOTS)}, so this process node cannot mount there")
    return Prepared(argv, env, workdir, mounts, binary)


def _sub_path(volume: Path, mount: dict) -> Path:
    """The folder or file a subPath names in its volume, made a folder where missing. A link the
    pod left in its volume must not take the mount out of it (a known escape): links are resolved
    and the result must lie in the volume, and the folders are then made and opened without
    following any link, so one swapped in after the check is refused, never followed."""
    sub = mount["subPath"]
    if ".." in sub.split("/"):
        raise StartError(f'subPath "{sub}" of volumeMount "{mount["name"]}" contains "..", which this node refuses; '
                         "name a path inside the volume")
    root = volume.resolve()
    within = (root / sub).resolve()
    if within != root and root not in within.parents:
        raise StartError(f'subPath "{sub}" of volumeMount "{mount["name"]}" leads out of the volume')
    try:
        os.close(enter.open_path(within, base=root, make=True))
    except OSError as exc:
        raise StartError(f'subPath "{sub}" of volumeMount "{mount["name"]}" changed while it was checked '
                         f"({exc.strerror}); a link there is not followed") from None
    return within


def _mount_point(path: str) -> None:
    """Where a user image's code folder mounts: a folder of this machine, made (empty) where it is
    missing, as a runtime makes a mount point in an image."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartError(f"cannot make the mount point {path} for the image's code folder: {exc}") from None
    if not Path(path).is_dir():
        raise StartError(f"{path}, where the image's code folder mounts, is not a folder on this machine")


# Mount points a built controller's image has and this machine lacks, made as empty folders as a
# runtime makes them in an image: Kueue writes its visibility API's certificate to /visibility (the
# path is in its code, so it cannot move). Only these, by role: any pod may name a controller's
# image, and a mount point of its choosing would be a folder made anywhere here as root.
MADE_MOUNT_POINTS = {"kueue": ("/visibility",)}


def _makeable(role: str, target: str) -> bool:
    return posixpath.normpath(target) in MADE_MOUNT_POINTS.get(role, ()) and not Path(target).exists()


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
          given: dict[str, str] | None = None, identity: security.Identity | None = None, hidden: Hidden | None = None,
          join: Callable[[], None] | None = None) -> Process:
    """The container's process, in the pod's network namespace `netns` (None: this machine's);
    `given`: what of `env` the node set rather than the pod; `identity`: the user and privileges
    its securityContext asks for; `hidden`: what of the cluster's folder it must not see; `join`:
    run in the child before exec (its cgroups)."""
    ready = prepare(program, container, env, volumes, workdir, given)
    # A folder in the code mount exists only once the mount is made: start in the pod's and enter it there.
    inside = ready.code is not None and ready.cwd.is_relative_to(ready.code[0])
    if ready.code:
        _mount_point(ready.code[0])
    if ready.binary is not None:
        for _, target, _ in ready.mounts or []:
            if _makeable(program.role, target):
                _mount_point(target)
    launch = workdir if inside else ready.cwd
    workdir.mkdir(parents=True, exist_ok=True)  # in the pod's folder, which only the node writes
    _make_folder(launch, [workdir, *volumes.values()])
    covers = [hidden] if hidden else []
    if identity and identity.uid != 0 and program.mode == programs.HOST:
        # The trainer image's python and code are this machine's: a folder above them that the
        # container's user cannot pass (a 0700 home) is covered in its namespace, with them bound back.
        wanted = [Path(sys.executable).resolve().parent, Path(sys.prefix), Path(sys.base_prefix).resolve(),
                  *(Path(p).resolve() for p in _code(ready.env))]
        covers += _reachable(identity, wanted)
        unreadable = next((p for p in wanted if not _passable(identity, p)), None)
        if unreadable:
            raise StartError(f"{unreadable} cannot be read by uid {identity.uid}, the container's runAsUser, so the "
                             "trainer cannot start as that user here; make that folder readable by every user "
                             "(0755), or run the pod as root (runAsUser: 0 and no runAsNonRoot)")
    shell = program.mode == programs.SHELL
    steps, sources, argv = mount_steps(hostname, hosts, ready.mounts, ready.binary, toolbox if shell else None,
                                       ready.argv, code=ready.code, cwd=ready.cwd if inside else None, hidden=covers,
                                       identity=identity, launch=launch)
    # A volume's folder is opened without following a link (one that appeared since it was checked
    # is refused); the node's own files (hosts, toolbox, code) as they are.
    opened = {name: [str(path), name.startswith("volume-")] for name, path in sources.items()}
    spec = {"netns": str(netns) if netns else None, "hostname": hostname, "steps": steps, "sources": opened,
            "identity": identity.spec() if identity else None, "argv": argv, "env": ready.env}
    channel = os.memfd_create("container-spec")  # the env may hold Secrets: never on a command line
    try:
        os.write(channel, json.dumps(spec).encode())
        os.lseek(channel, 0, os.SEEK_SET)
        proc = Process([str(Path(sys.executable).resolve()), "-I", "-S", str(ENTER), str(channel)], dict(NODE_ENV),
                       on_line, cwd=launch, preexec_fn=join, pass_fds=(channel,))
    except OSError as exc:
        raise StartError(f"cannot start {ready.argv[0]}: {exc}") from exc
    finally:
        os.close(channel)
    proc.env = ready.env  # what exec probes run beside it with: the container's env, not the node's
    return proc


def _make_folder(folder: Path, roots: list[Path]) -> None:
    """The container's working folder, made below the pod's own folder or a volume that holds it,
    without following a link there (the pod writes both)."""
    below = max((r for r in roots if folder == r or r in folder.parents), key=lambda r: len(r.parts), default=None)
    if below is None:
        raise StartError(f"the working folder {folder} lies outside the pod's own folders and its volumes")
    try:
        os.close(enter.open_path(folder, base=below, make=True))
    except OSError as exc:
        raise StartError(f"cannot make the working folder {folder}: {exc.strerror}; a link there is not followed") \
            from None


def _code(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(":") if p]


def _reachable(identity: security.Identity, wanted: list[Path]) -> list[Hidden]:
    """Covers for the folders above `wanted` that the container's user cannot pass, each with what
    of `wanted` lies under it bound back."""
    covers: dict[Path, list[Path]] = {}
    for path in wanted:
        blocked = _blocked(identity, path)
        if blocked is not None and blocked != path:
            covers.setdefault(blocked, []).append(path)
    return [Hidden(top, tuple(keep)) for top, keep in covers.items()]


def _merged(covers: list[Hidden]) -> list[Hidden]:
    """One cover per folder, none inside another (the outer one takes the inner one's folders)."""
    out: list[Hidden] = []
    for cover in sorted(covers, key=lambda c: len(c.root.parts)):
        outer = next((i for i, o in enumerate(out) if o.root == cover.root or o.root in cover.root.parents), None)
        if outer is None:
            out.append(cover)
        else:
            out[outer] = Hidden(out[outer].root, tuple(dict.fromkeys([*out[outer].keep, *cover.keep])))
    return out


def _passable(identity: security.Identity, folder: Path) -> bool:
    try:
        st = folder.stat()
    except OSError:
        return True  # nothing there to keep anyone out
    if st.st_uid == identity.uid:
        bit = 0o100
    elif st.st_gid == identity.gid or st.st_gid in identity.groups:
        bit = 0o010
    else:
        bit = 0o001
    return not folder.is_dir() or bool(st.st_mode & bit)


def _blocked(identity: security.Identity, path: Path) -> Path | None:
    """The first folder from / down to `path` that the container's user cannot pass."""
    return next((part for part in [*reversed(path.parents), path] if not _passable(identity, part)), None)


def hidden(root: Path, keep: list[Path], identity: security.Identity | None) -> Hidden:
    """What a container sees of the cluster's folder `root`: only `keep`. For a user other than
    root the cover goes on the first folder above `root` it could not pass, if any (a checkout
    under a 0700 home, pytest's 0700 folder), so its own folders are reachable by their paths."""
    top = root
    if identity is not None and identity.uid != 0:
        blocked = _blocked(identity, root)
        if blocked is not None and blocked != root:
            top = blocked
    return Hidden(top, tuple(dict.fromkeys(keep)))


def exec_in(pid: int, identity: security.Identity | None, argv: list[str], env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess:
    """`argv` run beside the container whose first process is `pid` (an exec probe): in its mount,
    UTS and network namespaces and its working folder, as its user. The child joins them and drops
    its privileges itself before it execs anything, so whatever the container has put at a path in
    its own view (a file bound over /usr/bin/setpriv) runs, if at all, as the container's user."""
    # Opened here, through this machine's /proc: the mount namespace is joined last, and the
    # container's folder may be one only its own mounts show.
    opened = [os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in ("net", "uts", "mnt")]
    opened.append(os.open(f"/proc/{pid}/cwd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
    user = identity.spec() if identity else None

    def join() -> None:
        for fd in opened[:-1]:
            if enter._libc.setns(fd, 0) != 0:  # noqa: SLF001 (enter.py's libc, loaded before the fork)
                raise OSError(ctypes.get_errno(), "setns")
        os.fchdir(opened[-1])
        if user:
            enter.become(user)

    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=join)
    finally:
        for fd in opened:
            os.close(fd)
