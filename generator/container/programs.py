"""Which program each image is on this machine, for `generator run`.
An image names a filesystem this machine does not have, so each image the project's charts use
maps to the local program it stands for; any other image fails the way a pull of a missing image
fails, unless `--image` says what it is here: REPO=KNOWN a copy of a known one, REPO=host your
own code run by this machine's Python on this machine's filesystem, REPO=DIR[:PATH] the same
with the folder DIR as what the image holds at PATH."""
from __future__ import annotations

import os
import posixpath
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from generator import paths
from generator.container.command import ENTRYPOINT, PathError, container_path

HOST = "host"  # runs on this machine's filesystem; volume paths in args and env become their folders
PRIVATE = "private"  # runs in a private mount namespace with each volume mounted at its mountPath
SHELL = "shell"  # a shell image: this machine's sh and coreutils, the pod's resolver as nslookup, the cluster's kubectl

USER_HOST = "host"  # --image REPO=host
CODE_PATH = "/workspace"  # where an image holds its code when neither PATH nor workingDir says
USER_ROLE = "user"
# This machine's own folders: a code folder's mount point, made where missing, is never made in them
# from a pod's workingDir (the node makes it as root: /etc/nologin would lock out every other user).
SYSTEM = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/root", "/var", "/run",
          "/proc", "/sys", "/dev")


@dataclass(frozen=True)
class Program:
    role: str  # trainer, operator, init, shell or test
    repository: str
    mode: str
    entrypoint: tuple[str, ...]  # the image's ENTRYPOINT, used when the container sets no command
    what: str = ""
    code: Path | None = None  # a user image's folder (REPO=DIR[:PATH]): what the image holds at code_path
    code_path: str | None = None  # None: the container's workingDir, else CODE_PATH
    user: tuple[int, int] = (0, 0)  # the image's USER (uid, gid): who it runs as where runAsUser is not set

    def env(self) -> dict[str, str]:
        """The image's own ENV."""
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if self.mode != HOST:
            return {"PATH": path}
        # python and torchrun in the image are this interpreter's, also where a shell script names them.
        env = {"PATH": f"{Path(sys.executable).parent}:{path}"}
        if self.role == "trainer":  # the trainer image's ENV: its package is this checkout
            env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(paths.ROOT))
        return env

    def code_at(self, container: dict) -> tuple[str, Path] | None:
        """(PATH, DIR) for a user image with a folder: where in the container DIR's files are."""
        if self.code is None:
            return None
        if self.code_path:
            return self.code_path, self.code
        # Mapped without PATH, the workingDir is where the code mounts: checked as a PATH would be.
        at = container_path("workingDir", container["workingDir"]) if container.get("workingDir") else CODE_PATH
        needed = would_hide(at) or next((f for f in SYSTEM if at == f or at.startswith(f + "/")), "")
        if needed:
            raise PathError("workingDir", f'workingDir "{container["workingDir"]}" is where image {self.repository}\'s '
                                          f"folder {self.code} mounts, and it would hide {needed}, which the container "
                                          f"needs from this machine; set workingDir to the folder the image keeps its "
                                          f"code in, such as {CODE_PATH}, or map the image as DIR:PATH")
        return at, self.code


class ImagePullError(Exception):
    """Reads like the kubelet's ErrImagePull."""


def repository(image: str) -> str:
    """The repository of an image reference: no tag, no digest, Docker Hub's implicit prefixes gone."""
    name = image.split("@", 1)[0]
    head, _, tail = name.rpartition(":")
    if head and "/" not in tail:
        name = head
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def image_user(dockerfile: Path) -> tuple[int, int]:
    """The last numeric `USER uid[:gid]` of a Dockerfile; root without one."""
    user = (0, 0)
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0].upper() == "USER":
            uid, _, gid = words[1].partition(":")
            if uid.isdigit() and (not gid or gid.isdigit()):
                user = (int(uid), int(gid or 0))
    return user


def _chart_image(chart: Path) -> dict:
    return yaml.safe_load((chart / "values.yaml").read_text())


# The images of upstream's Kubeflow Trainer, JobSet and Kueue charts that the local cluster runs, by
# role, with each image's USER: the controllers are distroless `nonroot` images (65532), which their
# charts' runAsNonRoot relies on.
NONROOT = (65532, 65532)
UPSTREAM = {
    "trainer-controller": (PRIVATE, ("/manager",), "Kubeflow Trainer's controller built into the cache", NONROOT),
    "jobset": (PRIVATE, ("/manager",), "the JobSet controller built into the cache", NONROOT),
    "kueue": (PRIVATE, ("/manager",), "Kueue's controller built into the cache", NONROOT),
    # The runtimes installer's alpine: `apk add kubectl` finds kubectl already there.
    "installer": (SHELL, ("sh",), "this machine's sh with the cluster's kubectl", (0, 0)),
}


def known(upstream: Mapping[str, str] | None = None) -> dict[str, Program]:
    """The charts' own images: their repositories are read from the charts' values, never restated.
    `upstream`: role -> repository of the upstream charts' images (UPSTREAM), read from those charts."""
    job_values = _chart_image(paths.JOB_CHART)
    operator_values = _chart_image(paths.OPERATOR_CHART)
    trainer = job_values["image"]["repository"]
    operator = operator_values["image"]["repository"]
    init = repository(operator_values["pytorchInitContainerImage"])
    helm_test = repository(operator_values["helmTest"]["image"])
    programs = [
        Program("trainer", trainer, HOST, ENTRYPOINT, what=f"python -m trainer from {paths.ROOT}",
                user=image_user(paths.TRAINER_DOCKERFILE)),
        Program("operator", operator, PRIVATE, ("/manager",), what="the operator built into the cache"),
        Program("init", init, SHELL, ("sh",), what="this machine's sh"),
        Program("shell", "busybox", SHELL, ("sh",), what="this machine's sh"),
        Program("test", helm_test, SHELL, ("curl",), what="this machine's sh and curl, for `helm test`"),
    ]
    # An upstream image that one of ours already is (alpine, our init image too) stays ours.
    programs += [Program(role, repo, UPSTREAM[role][0], UPSTREAM[role][1], what=UPSTREAM[role][2], user=UPSTREAM[role][3])
                 for role, repo in (upstream or {}).items() if repo not in {p.repository for p in programs}]
    return {p.repository: p for p in programs}


def of(role: str) -> Program:
    return next(p for p in known().values() if p.role == role)


def split_code(target: str) -> tuple[str, str | None]:
    """DIR[:PATH] -> (DIR, PATH or None). PATH is absolute, so a colon before a slash ends DIR."""
    head, sep, tail = target.rpartition(":")
    return (head, tail) if sep and head and tail.startswith("/") else (target, None)


def user(name: str, target: str) -> Program:
    """The program a user's image is here: `host`, or a folder DIR[:PATH] (DIR absolute, as
    `mapping` wrote it)."""
    if target == USER_HOST:
        return Program(USER_ROLE, name, HOST, (), what="this machine's python, torchrun, bash and sh")
    folder, at = split_code(target)
    return Program(USER_ROLE, name, HOST, (), code=Path(folder), code_path=at,
                   what=f"{folder} at {at or 'its workingDir, else ' + CODE_PATH}, run by this machine's python")


def own_code(repo: str) -> str:
    """The two ways to say an image is your own code, as every refusal offers them."""
    return (f"`--image {repo}=host` (its command runs with this machine's python) or `--image {repo}=DIR[:PATH]` (the "
            f"folder DIR is what the image holds at PATH, default its workingDir, else {CODE_PATH})")


def _needed() -> list[str]:
    """Folders a container of a user image needs from this machine, which its code folder must not hide."""
    found = [sys.prefix, sys.base_prefix, str(Path(sys.executable).parent), "/bin", "/sbin", "/usr/bin", "/usr/sbin",
             "/usr/local/bin", "/usr/local/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32",
             "/usr/lib64", "/usr/libx32", "/usr/local/lib", "/etc", "/proc", "/dev", "/sys", "/tmp", "/var/run", "/run"]
    for tool in ("sh", "bash"):
        where = shutil.which(tool)
        if where:
            found.append(str(Path(where).parent))
    return found


def _absolute(path: str) -> str:
    """An absolute path as the kernel reads it: `//bin`, `/./usr/` and `/tmp/../bin` are /bin, /usr
    and /bin (posixpath.normpath keeps a leading `//`)."""
    return "/" + posixpath.normpath(path).lstrip("/")


def would_hide(path: str) -> str | None:
    """The folder of this machine's that code at `path` in a container would hide (the folder itself
    or one under it), if any; `path` is read however it is spelled, and through this machine's links
    (a mount on /lib64 lands on what it points to)."""
    needed = {form for n in _needed() for form in (_absolute(n), os.path.realpath(n))}
    for form in dict.fromkeys((_absolute(path), os.path.realpath(_absolute(path)))):
        hidden = sorted(n for n in needed if n == form or n.startswith(form.rstrip("/") + "/"))
        if hidden:
            return hidden[0]
    return None


def mapping(value: str, known_repositories: list[str], cwd: Path | None = None) -> tuple[str, str]:
    """One `--image` value -> (repository, target): KNOWN, `host`, or DIR[:PATH] with DIR made
    absolute. Raises ValueError with what to write instead."""
    repo, sep, target = value.partition("=")
    forms = (f"write REPO=host (your own code, run by this machine's python), REPO=DIR[:PATH] (the folder DIR is what "
             f"the image holds at PATH, default its workingDir, else {CODE_PATH}), or REPO=KNOWN, where KNOWN is one of "
             f"{', '.join(known_repositories)}")
    if not sep or not repo or not target:
        raise ValueError(f"{value!r}: {forms}")
    head, colon, tag = repo.rpartition(":")
    name, tag = (head, tag) if colon and "/" not in tag else (repo, "")
    if "@" in repo or repository(name) != name:
        fixed = repository(repo) + (f":{tag}" if tag and "@" not in repo else "")
        raise ValueError(f"{value!r}: REPO is an image's repository, with a tag or without, never a digest, and "
                         f"Docker Hub's names short: write {fixed}={target}")
    if target in known_repositories or target == USER_HOST:
        return repo, target
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        # PATH becomes a line of the layer's Containerfile: a newline would add instructions of its own.
        raise ValueError(f"{value!r}: a control character (a newline, a tab) has no place in REPO, DIR or PATH; "
                         "write them on one line, without it")
    folder, at = split_code(target)
    where = (cwd or Path.cwd()) / Path(folder).expanduser()
    if not where.is_dir():
        raise ValueError(f"{value!r}: {folder} is not a folder here, nor a known image; {forms}")
    if at is not None:
        hidden = would_hide(at)
        if hidden:
            raise ValueError(f"{value!r}: PATH {at} would hide {hidden}, which the container needs from this "
                             f"machine; use the folder the image keeps its code in, such as {CODE_PATH}")
        at = _absolute(at)
    return repo, str(where.resolve()) + (f":{at}" if at else "")


def by_repository(aliases: Mapping[str, str]) -> dict[str, str]:
    """`--image` as `run` reads it: each REPO[:TAG] stands for every tag of REPO."""
    return {repository(ref): target for ref, target in aliases.items()}


def resolve(image: str, aliases: dict[str, str] | None = None, upstream: Mapping[str, str] | None = None) -> Program:
    """`aliases`: repository -> a known repository it stands for (a mirror, your own build of the
    trainer), `host`, or DIR[:PATH] (your own code). A controller's image resolves too, though
    `generator run` never starts one."""
    programs = known(upstream)
    name = repository(image)
    target = (aliases or {}).get(name, name)
    if target not in programs and name in (aliases or {}):
        program = user(name, target)
        if program.code is not None and not program.code.is_dir():
            raise ImagePullError(f'image "{image}" is the folder {program.code}, which is not there any more; '
                                 f"make it again, or map {name} anew with `--image`")
        return program
    program = programs.get(target)
    if program is None:
        listing = "; ".join(f"{p.repository} ({p.what})" for p in programs.values())
        raise ImagePullError(f'image "{image}" cannot run on this machine, which runs only these images: '
                             f"{listing}. For your own code pass {own_code(name)} to `cluster up` or `run`; pass "
                             f"`--image {name}=<one of them>` if it is a copy of one; or submit the job to a real cluster")
    return program
