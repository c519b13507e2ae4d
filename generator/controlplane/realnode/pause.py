"""The real node's sandbox (pause) image, the recipe of the build table's `pause` group
(controlplane/build.py): kubernetes' own pause.c from the k8s.io/kubernetes module of the control
plane's release, linked with gcc -static and packed FROM scratch as an OCI archive (oci.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from generator.controlplane import pins
from generator.controlplane.realnode import oci
from generator.errors import UserError

# The packer's source is part of what the archive is made from, so it is part of the group's stamp.
PACKER = Path(oci.__file__)


def _yield() -> None:
    """Built at a lower priority, as the node's Go builds are: it shares the machine's cores with everyone's work."""
    os.nice(10)


def _kubernetes_source() -> Path:
    """The k8s.io/kubernetes module's folder in the Go module cache (downloaded when absent)."""
    proc = subprocess.run([shutil.which("go"), "mod", "download", "-json", f"k8s.io/kubernetes@{pins.kube_version()}"],
                          cwd=pins.GO_MODULE, capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    try:
        return Path(json.loads(proc.stdout)["Dir"])
    except (ValueError, KeyError):
        raise UserError(f"the k8s.io/kubernetes module could not be downloaded for pause.c: {proc.stderr.strip()}; "
                        "the Go module proxy must be reachable (GOPROXY)") from None


def build(staging: Path) -> None:
    """Write pins.PAUSE_ARCHIVE into `staging`."""
    source = _kubernetes_source() / "build" / "pause" / "linux" / "pause.c"
    program = staging / "pause"
    proc = subprocess.run(["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{pins.PAUSE_TAG}-pytorchjob-kit",
                           "-o", str(program), str(source)], capture_output=True, text=True, preexec_fn=_yield)
    if proc.returncode != 0:
        raise UserError(f"gcc -static of {source} failed:\n{proc.stderr.strip()}\na static libc is needed "
                        "(`apt-get install -y libc6-dev`)")
    image = oci.Image(pins.PAUSE_IMAGE, {"pause": (program.read_bytes(), 0o755)}, ("/pause",), pins.PAUSE_USER)
    oci.write(image, staging / pins.PAUSE_ARCHIVE)
    program.unlink()
