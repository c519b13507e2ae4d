"""Which program each image is on this machine, for the process node and `generator run` alike.
An image names a filesystem this machine does not have, so each image the project's charts use
maps to the local program it stands for; any other image fails the way a pull of a missing image
fails, unless `--image REPO=KNOWN` says it is a copy of a known one.

Built programs (the operator) live where the control plane's build puts them; that package passes
their paths in (`binaries`), so this one knows nothing of how they are built."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from generator import paths
from generator.container.command import ENTRYPOINT

HOST = "host"  # runs on this machine's filesystem; volume paths in args and env become their folders
PRIVATE = "private"  # runs in a private mount namespace with each volume mounted at its mountPath
SHELL = "shell"  # a shell image: this machine's sh and coreutils, the pod's resolver as nslookup, the cluster's kubectl


@dataclass(frozen=True)
class Program:
    role: str  # trainer, operator, init, shell or test
    repository: str
    mode: str
    entrypoint: tuple[str, ...]  # the image's ENTRYPOINT, used when the container sets no command
    binary: Path | None = None  # what the image's entrypoint path is on this machine (PRIVATE), once passed in
    what: str = ""

    def env(self) -> dict[str, str]:
        """The image's own ENV."""
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if self.mode == HOST:
            # The trainer image's python is this interpreter, with the packages and this checkout.
            return {"PATH": f"{Path(sys.executable).parent}:{path}", "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": str(paths.ROOT)}
        return {"PATH": path}


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


def _chart_image(chart: Path) -> dict:
    return yaml.safe_load((chart / "values.yaml").read_text())


# The images of upstream's Kubeflow Trainer and JobSet charts that the local cluster runs, by role.
UPSTREAM = {
    "trainer-controller": (PRIVATE, ("/manager",), "Kubeflow Trainer's controller built into the cache"),
    "jobset": (PRIVATE, ("/manager",), "the JobSet controller built into the cache"),
    # The runtimes installer's alpine: `apk add kubectl` finds kubectl already there.
    "installer": (SHELL, ("sh",), "this machine's sh with the cluster's kubectl"),
}


def known(binaries: Mapping[str, Path] | None = None, upstream: Mapping[str, str] | None = None) -> dict[str, Program]:
    """The charts' own images: their repositories are read from the charts' values, never restated.
    `binaries`: role -> the built program a PRIVATE image runs (the control plane knows where).
    `upstream`: role -> repository of the upstream charts' images (UPSTREAM), read from those charts."""
    job_values = _chart_image(paths.JOB_CHART)
    operator_values = _chart_image(paths.OPERATOR_CHART)
    trainer = job_values["image"]["repository"]
    operator = operator_values["image"]["repository"]
    init = repository(operator_values["pytorchInitContainerImage"])
    helm_test = repository(operator_values["helmTest"]["image"])
    programs = [
        Program("trainer", trainer, HOST, ENTRYPOINT, what=f"python -m trainer from {paths.ROOT}"),
        Program("operator", operator, PRIVATE, ("/manager",), what="the operator built into the cache"),
        Program("init", init, SHELL, ("sh",), what="this machine's sh"),
        Program("shell", "busybox", SHELL, ("sh",), what="this machine's sh"),
        Program("test", helm_test, SHELL, ("curl",), what="this machine's sh and curl, for `helm test`"),
    ]
    # An upstream image that one of ours already is (alpine, our init image too) stays ours.
    programs += [Program(role, repo, UPSTREAM[role][0], UPSTREAM[role][1], what=UPSTREAM[role][2])
                 for role, repo in (upstream or {}).items() if repo not in {p.repository for p in programs}]
    binaries = binaries or {}
    return {p.repository: replace(p, binary=binaries.get(p.role)) for p in programs}


def of(role: str) -> Program:
    return next(p for p in known().values() if p.role == role)


def resolve(image: str, aliases: dict[str, str] | None = None, binaries: Mapping[str, Path] | None = None,
            upstream: Mapping[str, str] | None = None) -> Program:
    """`aliases`: repository -> a known repository it stands for (a mirror, your own build of the trainer).
    Without `binaries` a built program resolves with no binary: `generator run` never starts one."""
    programs = known(binaries, upstream)
    name = repository(image)
    program = programs.get((aliases or {}).get(name, name))
    if program is None:
        listing = "; ".join(f"{p.repository} ({p.what})" for p in programs.values())
        raise ImagePullError(f'image "{image}" cannot run on this machine, which runs only these images: '
                             f"{listing}. Use one of them, pass `--image {name}=<one of them>` (to `cluster up` or "
                             "`run`) if it is a copy of one, or submit the job to a real cluster")
    if program.binary is not None and not os.access(program.binary, os.X_OK):
        raise ImagePullError(f'image "{image}" is {program.binary}, which is not built; run '
                             f"`python -m generator cluster build`")
    return program
