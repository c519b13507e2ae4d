"""A container's first process on the process node, as a runtime's init is: it joins the pod's
network namespace, makes the container's mount and UTS namespaces, mounts its view, becomes the
container's user and only then execs the container's program with the container's env.

    python -I -S enter.py FD

FD holds the spec as JSON (the env is in it: never on a command line other users can read). Every
step is a system call of this process: nothing is exec'd as root after the first mount, so no file
a volume brings (a `setpriv` over /usr/bin, an /etc/ld.so.preload) and nothing in the pod's env
(PATH, LD_PRELOAD) reaches a root process. Volume sources and the pod's own folders come as open
descriptors the node checked, and are mounted through /proc/self/fd, so a link swapped in after the
check is never followed; a mount point below another volume is reached without following links.

Run by path with -I -S, never imported by the program it starts: standard library only."""
import ctypes
import errno
import json
import os
import stat
import sys
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWUSER, CLONE_NEWNET = 0x20000, 0x4000000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# statvfs's flags that a bind remount must repeat (the kernel refuses to drop a locked one).
_KEPT = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
         (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)


class SetupError(Exception):
    pass


def open_path(path: Path, base: Path | None = None, make: bool = False) -> int:
    """`path` opened (O_PATH) without following a link anywhere in it (below `base`, when given,
    which is opened as it is), as the object to mount: a link that appeared after `path` was
    resolved raises ELOOP instead of being followed. With `make`, missing folders below `base`
    are made."""
    path, base = Path(path), None if base is None else Path(base)
    parts = path.relative_to(base).parts if base is not None else path.parts[1:]
    fd = os.open(base if base is not None else "/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                os.mkdir(part, dir_fd=fd)
                nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
            mode = os.fstat(fd).st_mode  # O_PATH|O_NOFOLLOW opens a link itself rather than refusing it
            if stat.S_ISLNK(mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
            if i < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(code)}")


def _bytes(value) -> bytes | None:
    return None if value is None else str(value).encode()


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = _bytes
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {source} on {target}")


def _fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def _namespaces(spec: dict) -> None:
    if spec.get("netns"):
        fd = os.open(spec["netns"], os.O_RDONLY | os.O_CLOEXEC)
        _check(_libc.setns(fd, CLONE_NEWNET), f"join the pod's network namespace {spec['netns']}")
        os.close(fd)
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | (0 if uid == 0 else CLONE_NEWUSER)), "unshare")
    if uid != 0:  # unprivileged: root inside a user namespace that maps only our own ids, which allows the mounts
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    with open("/proc/sys/kernel/hostname", "w") as f:
        f.write(spec["hostname"])


class View:
    """The container's mounts, made in order. `pod_roots`: the (device, inode) of every volume
    mounted so far: below one of them the pod writes, so no link there is followed."""

    def __init__(self, fds: dict[str, int]):
        self.fds = fds
        self.pod_roots: set[tuple[int, int]] = set()

    def source(self, ref) -> str:
        return _fd_path(self.fds[ref[1:]]) if isinstance(ref, str) and ref.startswith("@") else ref

    def _walk(self, target: str, kind: str) -> tuple[int, str, int]:
        """The folder holding `target`'s last part, open, and that part, made where missing (a
        folder, or an empty file for kind "file"). Links are followed only outside the pod's
        volumes (this machine's own, such as /var/run -> /run)."""
        parts = [p for p in target.split("/") if p]
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        pod = False
        try:
            for i, part in enumerate(parts[:-1]):
                pod = pod or self._in_pod(fd)
                flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC | (os.O_NOFOLLOW if pod else 0)
                try:
                    nxt = os.open(part, flags, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, flags, dir_fd=fd)
                except OSError as exc:
                    raise SetupError(f"mount point {target}: {'/'.join(parts[:i + 1])} is not a folder reached "
                                     f"without a link ({exc.strerror})") from None
                os.close(fd)
                fd = nxt
            last = parts[-1]
            if self._in_pod(fd) or pod:
                mode = os.O_NOFOLLOW  # the pod writes here: its links are never followed
            else:
                mode = 0
            try:
                found = os.stat(last, dir_fd=fd, follow_symlinks=not mode)
            except FileNotFoundError:
                found = None
            if found is None:
                if kind == "dir":
                    os.mkdir(last, 0o755, dir_fd=fd)
                else:
                    os.close(os.open(last, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                                     dir_fd=fd))
            elif stat.S_ISLNK(found.st_mode):
                raise SetupError(f"mount point {target} is a link inside a volume; the node follows none there")
            return fd, last, mode
        except BaseException:
            os.close(fd)
            raise

    def _in_pod(self, fd: int) -> bool:
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino) in self.pod_roots

    def bind(self, source, target: str, kind: str = "dir", read_only: bool = False, pod: bool = False) -> None:
        """`source` at `target`, through an open descriptor of the mount point; read-only through one
        of the new mount's root, checked to be the source."""
        parent, last, mode = self._walk(target, kind)
        try:
            point = os.open(last, os.O_PATH | os.O_CLOEXEC | mode, dir_fd=parent)
            try:
                if stat.S_ISLNK(os.fstat(point).st_mode):  # swapped in since the walk looked
                    raise SetupError(f"mount point {target} is a link inside a volume; the node follows none there")
                _mount(self.source(source), _fd_path(point), None, MS_BIND)
            finally:
                os.close(point)
            root = os.open(last, os.O_PATH | os.O_CLOEXEC | mode, dir_fd=parent)
            try:
                st, want = os.fstat(root), os.stat(self.source(source))
                if (st.st_dev, st.st_ino) != (want.st_dev, want.st_ino):
                    raise SetupError(f"mount point {target} changed while it was mounted")
                if pod:
                    self.pod_roots.add((st.st_dev, st.st_ino))
                if read_only:
                    _remount_ro(_fd_path(root), bind=True)
            finally:
                os.close(root)
        finally:
            os.close(parent)


def _remount_ro(path: str, bind: bool) -> None:
    kept = os.statvfs(path).f_flag
    flags = MS_REMOUNT | MS_RDONLY | (MS_BIND if bind else 0)
    for st_flag, ms_flag in _KEPT:
        if kept & st_flag:
            flags |= ms_flag
    _mount(None, path, None, flags)


def _steps(spec: dict, view: View) -> None:
    for step in spec["steps"]:
        op, args = step[0], step[1:]
        if op == "bind":
            view.bind(*args)
        elif op == "tmpfs":
            _mount(args[0], args[1], "tmpfs", 0, args[2] if len(args) > 2 else None)
        elif op == "mkdir":
            os.makedirs(args[0], exist_ok=True)  # inside a tmpfs this process just made
        elif op == "remount_ro":
            _remount_ro(args[0], bind=args[1])
        elif op == "chdir":
            os.chdir(args[0])
        else:
            raise SetupError(f"unknown step {op}")


def become(identity: dict) -> None:
    """The securityContext: bounding set, inheritable and ambient capabilities, groups, ids, and
    no_new_privs, in the order the kernel allows them (capabilities first, while still root)."""
    for cap in identity["drop"]:
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    if identity["drop"]:
        _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()
        _check(_libc.capget(header, data), "capget")
        data[2] = data[5] = 0  # inheritable, both words
        _check(_libc.capset(header, data), "clear inheritable capabilities")
    os.setgroups(identity["groups"])
    os.setresgid(identity["gid"], identity["gid"], identity["gid"])
    os.setresuid(identity["uid"], identity["uid"], identity["uid"])
    if identity["no_new_privs"]:
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def main(args: list[str]) -> int:
    with os.fdopen(int(args[0]), "rb") as f:
        spec = json.loads(f.read())
    fds: dict[str, int] = {}
    try:
        _namespaces(spec)
        # Opened in the container's mount namespace (a bind takes its source from there), before
        # any mount covers them.
        for name, (path, nofollow) in spec["sources"].items():
            try:
                fds[name] = open_path(path) if nofollow else os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                raise SetupError(f"cannot mount {path}: {exc.strerror} (a link inside a volume is not followed)") \
                    from None
        _steps(spec, View(fds))
        if spec.get("identity"):
            become(spec["identity"])
    except (SetupError, OSError) as exc:
        print(f"the process node could not set up the container: {exc}", file=sys.stderr, flush=True)
        return 128
    for fd in fds.values():
        os.close(fd)
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)  # searched on the container's PATH, as the container's user
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127 if exc.errno == errno.ENOENT else 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
