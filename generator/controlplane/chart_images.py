"""Every image the charts name, made on this machine and pushed into the local registry under its
upstream name, so the charts install unchanged from it:

- the trainer's image (trainer/Dockerfile, generator/images/trainer.py);
- the controllers (training-operator, Kubeflow Trainer's, JobSet's, Kueue's) from the binaries `cluster
  build` makes, FROM scratch with /manager as upstream's images have it, as the distroless
  `nonroot` user (65532) that Trainer's and JobSet's images run as and the operator chart sets;
- alpine (the operator's init container, `nslookup`; Trainer's runtimes installer) as Debian's
  static busybox with its applets, dash as sh, and BIND's nslookup: busybox 1.35's nslookup fails
  when any of the pod's search domains lacks the name (alpine 3.10's busybox 1.30 does not), so the
  operator's Workers would wait for their Master forever; and the cluster's kubectl with an `apk`
  that finds it, for Trainer's runtimes installer (`apk add kubectl`);
- curlimages/curl (the operator chart's `helm test` pod) as the Debian base with curl;
- pytorch/pytorch (Trainer's torch-distributed runtime, which its runtimes installer applies) as the
  trainer's image without its entrypoint: the same torch (2.13.0, constraints.txt), Python, bash and
  torchrun, working in a /workspace its user (1000, not upstream's root) may write to.

The names come from rendering the charts with their default values (Trainer's and Kueue's with the
values `cluster up --trainer` and `--kueue` install them with), never from a list kept here."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from generator import helm, paths
from generator.controlplane import build, pins, registry
from generator.controlplane.releases import kueue as kueue_release
from generator.controlplane.releases import trainer as trainer_release
from generator.errors import UserError
from generator.images import base, recipe, trainer
from generator.images import engine as engine_
from generator.images.registry import split

NONROOT = "65532:65532"
STAND_IN_PROGRAMS = ("busybox", "dash", "nslookup")  # the alpine stand-in's, from Debian's packages
ALPINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # as alpine's image sets it
CURL_USER = "100:101"  # curlimages/curl's curl_user
TORCH_REPOSITORY = "docker.io/pytorch/pytorch"

# apk in the alpine stand-in: what sits beside it already (the cluster's kubectl) is installed; anything
# else is not there to install, as for an alpine without network.
APK = """#!/bin/sh
[ "$1" = add ] || { echo "apk $1: not available in this image (no network to install from)" >&2; exit 1; }
shift
packages=""
for pkg in "$@"; do
  case "$pkg" in -*) continue;; esac
  [ -x "$(dirname "$0")/$pkg" ] || { echo "ERROR: unable to select packages: $pkg (no such package)" >&2; exit 1; }
  packages="$packages $pkg"
done
echo "OK:$packages already here (no network to install from)"
"""


def _images(objects) -> list[str]:
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    found.extend(c["image"] for c in value if isinstance(c, dict) and c.get("image"))
                    for c in value:
                        found.extend(a.split("=", 1)[1] for a in (c.get("args") or []) + (c.get("command") or [])
                                     if isinstance(a, str) and a.startswith("--pytorch-init-container-image="))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(objects)
    for obj in objects:  # what a ConfigMap carries for a Job to apply (Trainer's runtimes installer)
        if isinstance(obj, dict) and obj.get("kind") == "ConfigMap":
            for text in (obj.get("data") or {}).values():
                try:
                    walk(list(yaml.safe_load_all(text)))
                except yaml.YAMLError:
                    continue  # not YAML: names no image
    return found


def named() -> dict[str, str]:
    """image -> the chart that names it, as the charts render with their defaults."""
    out: dict[str, str] = {}
    for chart, values in ((paths.OPERATOR_CHART, {}), (paths.JOB_CHART, {}), (paths.JOB_CHART, {"resources": {"gpus": 1}})):
        for image in _images(helm.render_objects(chart, values)):
            out.setdefault(base.qualified(image), chart.name)
    with tempfile.TemporaryDirectory() as tmp:  # Trainer's chart as `cluster up --trainer` installs it
        chart = trainer_release.stage(Path(tmp))
        for image in _images(helm.render_objects(chart, trainer_release.VALUES, trainer_release.NAME,
                                                 trainer_release.NAMESPACE)):
            out.setdefault(base.qualified(image), chart.name)
    kueue = kueue_release.checked_chart()  # as `cluster up --kueue` installs it
    for image in _images(helm.render_objects(kueue, kueue_release.values(kueue), kueue_release.NAME,
                                             kueue_release.NAMESPACE)):
        out.setdefault(base.qualified(image), kueue.name)
    return dict(sorted(out.items()))


def not_held(reg: registry.Registry, operator_values: dict) -> list[str]:
    """The images charts/pytorch-operator names with `operator_values` (its own and its init
    container's) that the registry lacks: the real node pulls only from it, so the operator would
    never start and `cluster up` would wait out its timeout. `helm test`'s pod is left to helm test."""
    installed = [o for o in helm.render_objects(paths.OPERATOR_CHART, operator_values)
                 if "helm.sh/hook" not in ((o.get("metadata") or {}).get("annotations") or {})]
    images = {base.qualified(i) for i in _images(installed)}
    return sorted(i for i in images if "@" not in i and not reg.has(i))  # a digest: whatever holds it answers


@dataclass(frozen=True)
class Made:
    """How one named image is made here."""
    name: str
    kind: str  # trainer, binary, busybox, curl or torch
    binary: str = ""  # kind binary: which built binary is its /manager


def plan(images: dict[str, str]) -> list[Made]:
    from generator.container import programs

    repo_of = {base.qualified(trainer.repository()): "trainer",
               base.qualified(programs.repository(programs.of("operator").repository)): pins.OPERATOR_BINARY}
    for role, repo in trainer_release.images().items():
        binary = {"trainer-controller": pins.TRAINER_BINARY, "jobset": pins.JOBSET_BINARY}.get(role)
        if binary:
            repo_of[base.qualified(repo)] = binary
    for repo in kueue_release.images().values():
        repo_of[base.qualified(repo)] = pins.KUEUE_BINARY
    out = []
    for image in images:
        repo, _ = split(image)
        made = repo_of.get(repo)
        if made == "trainer":
            out.append(Made(image, "trainer"))
        elif made:
            out.append(Made(image, "binary", made))
        elif repo == "docker.io/library/alpine":
            out.append(Made(image, "busybox"))
        elif repo == "docker.io/curlimages/curl":
            out.append(Made(image, "curl"))
        elif repo == TORCH_REPOSITORY:
            out.append(Made(image, "torch"))
        else:
            raise UserError(f"{image}, which the chart {images[image]} names, has no recipe here: say how it is made "
                            f"in {Path(__file__).relative_to(paths.PACKAGE.parent)}")
    return out


def _binary_rootfs(binary: Path, into: Path) -> None:
    """/manager and what it loads (a cgo build links glibc), and a /tmp anyone may write to."""
    root = into / "rootfs"
    (root / "tmp").mkdir(parents=True)
    (root / "tmp").chmod(0o1777)
    _with_libraries(binary, root, "manager")


def _with_libraries(program: Path, root: Path, at: str) -> None:
    """`program` at `root`/`at`, and the shared libraries it loads at their own paths under `root`."""
    (root / at).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(program, root / at)
    ldd = subprocess.run(["ldd", str(program)], capture_output=True, text=True)
    for line in ldd.stdout.splitlines() if ldd.returncode == 0 else []:
        for word in line.split():
            if word.startswith("/") and Path(word).is_file():
                target = root / word.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(word).resolve(), target)


DOCKERFILES = {
    "binary": f'FROM scratch\nCOPY rootfs/ /\nUSER {NONROOT}\nENTRYPOINT ["/manager"]\n',
    # busybox's applets as links beside it, as alpine's /bin has them, but for the two the rootfs brings
    # (--install leaves a file there alone): sh is dash, since Debian's busybox shell runs its own applet
    # for `nslookup` whatever PATH says, and nslookup is BIND's.
    "busybox": f'FROM scratch\nCOPY rootfs/ /\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH={ALPINE_PATH}\n'
               'CMD ["/bin/sh"]\n',
    "curl": 'ARG BASE\nFROM ${BASE}\nRUN apt-get update && apt-get install -y --no-install-recommends curl '
            f'&& rm -rf /var/lib/apt/lists/*\nUSER {CURL_USER}\nENTRYPOINT ["curl"]\n',
    # The SDKs' commands (bash -c writing a function's source to a file in the working folder, then
    # torchrun or python) and upstream's WORKDIR; the trainer's user, never root.
    "torch": 'ARG BASE\nFROM ${BASE}\nUSER root\nRUN mkdir -p /workspace && chown 1000:1000 /workspace\n'
             'USER 1000:1000\nWORKDIR /workspace\nENTRYPOINT []\nCMD ["bash"]\n',
}


def _made(eng: engine_.Engine, made: Made, binaries: dict[str, Path], say, show, trainer_image: str = "") -> str:
    """The local name of the image `made` stands for (not the trainer's: images/trainer.py builds
    that, with its variant; the torch image is built FROM `trainer_image`), built now if the store
    lacks it up to date."""
    dockerfile_text = DOCKERFILES[made.kind]
    args: dict[str, str] = {}
    stamp = dockerfile_text
    if made.kind == "binary":
        stamp += str(binaries[made.binary])  # its folder is named by a hash of what it is built from
    elif made.kind == "busybox":
        engine_.install(list(STAND_IN_PROGRAMS), say)
        stamp += "".join(hashlib.sha256(Path(shutil.which(p)).read_bytes()).hexdigest() for p in STAND_IN_PROGRAMS)
        stamp += str(binaries["kubectl"]) + APK  # kubectl's folder is named by what it is built from
    else:
        args["BASE"] = trainer_image if made.kind == "torch" else base.ensure(eng, say, show)
        stamp += eng.image_id(args["BASE"]) or ""
    with tempfile.TemporaryDirectory(dir=engine_.folder(), prefix=".context-") as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(dockerfile_text)
        job = recipe.Recipe(made.name, context / "Dockerfile", context, args, stamp=stamp)
        if recipe.current(eng, job):
            return made.name
        if made.kind == "binary":
            _binary_rootfs(binaries[made.binary], context)
        elif made.kind == "busybox":
            (context / "rootfs" / "bin").mkdir(parents=True)
            shutil.copy2(shutil.which("busybox"), context / "rootfs" / "bin" / "busybox")
            for program, at in (("dash", "bin/sh"), ("nslookup", "usr/bin/nslookup")):
                _with_libraries(Path(shutil.which(program)), context / "rootfs", at)
            (context / "rootfs" / "bin" / "nslookup").symlink_to("/usr/bin/nslookup")
            # Trainer's runtimes installer runs `apk add kubectl` and then kubectl: no Alpine repository is
            # reachable, so the image holds the cluster's own kubectl and an apk that finds it there.
            _with_libraries(binaries["kubectl"], context / "rootfs", "usr/bin/kubectl")
            (context / "rootfs" / "usr" / "bin" / "apk").write_text(APK)
            (context / "rootfs" / "usr" / "bin" / "apk").chmod(0o755)
        say(f"building {made.name} ({made.kind}) with {eng.name}")
        recipe.ensure(eng, job, show=show)
    return made.name


def prepare(say=print, show=None, variant: str = "auto") -> dict[str, str]:
    """Each image the charts name, made here once per machine: name -> its local image."""
    made = plan(named())
    eng = engine_.get(say)
    groups = {build.group_of(m.binary) for m in made if m.binary}
    if any(m.kind == "busybox" for m in made):
        groups.add(build.group_of("kubectl"))
    binaries = build.ensure(say, groups=sorted(groups))
    builds: dict[str, str] = {}  # variant asked -> the trainer's image built for it
    local: dict[str, str] = {}
    def trainer_build(wanted: str) -> str:
        if wanted not in builds:
            builds[wanted] = base.qualified(trainer.build(wanted, say, show)[0])
        return builds[wanted]

    for m in made:
        if m.kind == "trainer":
            # The CUDA name holds the CUDA build alone; the CPU one holds `variant`'s build, which is the CUDA
            # build where only that can be made here (it runs on the CPU too).
            local[m.name] = trainer_build("gpu" if m.name.endswith("-cuda") else variant)
        else:
            local[m.name] = _made(eng, m, binaries, say, show, trainer_build(variant) if m.kind == "torch" else "")
    return local


def seed(reg: registry.Registry, say=print, show=None, variant: str = "auto") -> dict[str, str]:
    """Make what the registry should hold (once per machine) and push what it lacks: these images,
    and the project's charts as OCI artifacts (oci_charts.py). The images' names -> their local images."""
    import fcntl

    from generator.controlplane import oci_charts

    local = prepare(say, show, variant)
    eng = engine_.get(say)
    engine_.install(["skopeo"], say)
    build.ensure(say, groups=[build.group_of(pins.HELM_BINARY)])  # packages and pushes the charts
    with open(reg.root / ".seed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two clusters coming up side by side push once
        for name, ref in local.items():
            if registry.push(reg, eng, ref, name, say) and ref != name and ref.endswith("-cuda"):
                say(f"{name}: the CPU build cannot be made here; the registry holds the CUDA build {ref} under this "
                    "name too (it runs on the CPU)")
        oci_charts.publish(reg, say)
    return local
