"""Room on disk for what the real node will unpack: its containerd, in the cluster's own folder,
keeps each image it pulls twice (the compressed layers in its content store, and the unpacked
snapshot, at least as large), so a cluster takes at least twice the compressed size of the images
it pulls: the charts' controllers and alpine at `cluster up`, the trainer's image (5 GB and more)
at the first job. Sized from the registry's manifests (each layer counted once), before anything
starts: a disk that fills later makes the kubelet evict the operator and the jobs' pods
(diagnose's DiskPressure), which reads as a hang rather than a figure."""
from __future__ import annotations

import shutil
from pathlib import Path

from generator import helm, paths
from generator.errors import UserError
from generator.images import base, manifests
from generator.images.registry import Registry

# The kubelet's eviction threshold for the node's filesystems (realnode/config.py's evictionHard):
# below it, pods are evicted.
EVICTION_PERCENT = 1


def pulled(operator_values: dict | None, operator: bool, extra: list[str]) -> list[str]:
    """The images the node will pull, as the registry names them: the operator chart's (as the
    values name them), the job chart's default image (the trainer's; not also its CUDA build, which
    only a GPU job pulls: never a refusal for what may not come) and `extra` (your --image ones)."""
    from generator.controlplane.chart_images import _images

    renders = [(paths.JOB_CHART, {})]
    if operator:
        renders.append((paths.OPERATOR_CHART, operator_values or {}))
    found = {base.qualified(i) for chart, values in renders for i in _images(helm.render_objects(chart, values))}
    return sorted(found | {base.qualified(i) for i in extra})


def layers(reg: Registry, images: list[str]) -> dict[str, int]:
    """digest -> compressed size of every layer of `images` the registry holds (an image it lacks
    adds nothing: `cluster up` names those on its own)."""
    out: dict[str, int] = {}
    for image in images:
        if "@" in image:
            continue
        try:
            found = manifests.walk(reg.request, manifests.parse(image), image, "the registry on this machine")
        except manifests.Unreadable:
            continue
        out.update(dict(found.layers) if found else {})
    return out


def gb(size: float) -> str:
    return f"{size / 10**9:.1f} GB" if size >= 10**9 else f"{size / 10**6:.1f} MB"


def check(root: Path, reg: Registry, images: list[str]) -> None:
    """Refuse, with the figures and the fix, when the filesystem of `root` (the cluster's folder)
    has less free space than the node will unpack plus the kubelet's eviction margin."""
    compressed = sum(layers(reg, images).values())
    if not compressed:
        return
    probe = root
    while not probe.exists():
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    margin = usage.total * EVICTION_PERCENT // 100
    needed = 2 * compressed + margin
    if usage.free >= needed:
        return
    raise UserError(f"{root} is on a filesystem with {gb(usage.free)} free, and the node will unpack at least "
                    f"{gb(2 * compressed)} there (the {len(images)} images it pulls, {gb(compressed)} compressed, each "
                    f"kept compressed and unpacked) and keep {gb(margin)} free ({EVICTION_PERCENT}% of the filesystem: "
                    f"below that the kubelet evicts pods): free {gb(needed - usage.free)} or more, for example with "
                    "`python -m generator cluster down --purge --dir DIR` of clusters you no longer use and `podman "
                    "image prune`, or put the cluster on a larger filesystem with --dir")
