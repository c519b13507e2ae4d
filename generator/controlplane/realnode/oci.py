"""An OCI image archive (image-layout as one tar) of a few files FROM scratch, the form
`ctr images import` reads: no Docker, no buildah. The real node's sandbox (pause) image is one;
any small static program packs the same way. Written byte for byte the same for the same input
(fixed times and owners), so its digest names its content."""
from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
# containerd names an imported image by this annotation of its index entry.
NAME_ANNOTATION = "io.containerd.image.name"
REF_ANNOTATION = "org.opencontainers.image.ref.name"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


@dataclass(frozen=True)
class Image:
    name: str  # a full reference, as pods name it: localhost/pytorchjob-kit/pause:3.10.2
    files: dict[str, tuple[bytes, int]]  # path in the image -> (content, mode)
    entrypoint: tuple[str, ...]
    user: str = ""

    @property
    def tag(self) -> str:
        last = self.name.rsplit("/", 1)[-1]
        return last.split(":", 1)[1] if ":" in last else "latest"


def architecture() -> str:
    machine = platform.machine()
    if machine not in _ARCH:
        raise ValueError(f"no OCI architecture known for this machine's {machine!r}")
    return _ARCH[machine]


def _tar(entries: dict[str, tuple[bytes, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            data, mode = entries[path]
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _blob(data: bytes) -> tuple[str, dict]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return digest, {"digest": digest, "size": len(data)}


def _json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def archive(image: Image) -> bytes:
    """The image as an OCI image-layout tar: oci-layout, index.json and its blobs."""
    layer = _tar(image.files)
    layer_digest, layer_ref = _blob(layer)
    config = _json({"architecture": architecture(), "os": "linux",
                    "config": {"Entrypoint": list(image.entrypoint), **({"User": image.user} if image.user else {})},
                    "rootfs": {"type": "layers", "diff_ids": [layer_digest]}})
    config_digest, config_ref = _blob(config)
    manifest = _json({"schemaVersion": 2, "mediaType": MANIFEST, "config": {"mediaType": CONFIG, **config_ref},
                      "layers": [{"mediaType": LAYER, **layer_ref}]})
    manifest_digest, manifest_ref = _blob(manifest)
    index = _json({"schemaVersion": 2, "manifests": [{
        "mediaType": MANIFEST, **manifest_ref,
        "annotations": {NAME_ANNOTATION: image.name, REF_ANNOTATION: image.tag}}]})
    blobs = {f"blobs/sha256/{d.split(':', 1)[1]}": (data, 0o644)
             for d, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest))}
    return _tar({"oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644), "index.json": (index, 0o644), **blobs})


def write(image: Image, path: Path) -> Path:
    path.write_bytes(archive(image))
    return path
