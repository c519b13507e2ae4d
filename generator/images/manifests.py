"""An image's config read through the OCI distribution API from one registry, as a pull reads it:
the name resolved as a pull resolves it, the manifest (the platform's, where it is an index),
then the config blob with its digest checked, and the layers left to read on demand."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field

from generator.images import base, registry

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"  # docker.io's names are served from here
PLATFORM = ("linux", "amd64")
# The layers read to find a folder's owner and mode, from the top: a few small ones (a COPY, a
# useradd) are cheap; a base or a pip install of torch (gigabytes) is not, and is never read.
LAYER_BUDGET = 16 << 20
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


@dataclass(frozen=True)
class ImageConfig:
    """What an image runs when a container leaves it to the image (its config's)."""
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    workdir: str
    user: str

    def runs(self, args: list | None) -> list[str]:
        """What a container that sets no command runs before its args, by Kubernetes' rule: the
        ENTRYPOINT, then the CMD unless the container gives args (they replace the CMD)."""
        return [*self.entrypoint, *([] if args else self.cmd)]


@dataclass(frozen=True)
class Found:
    config: ImageConfig
    where: str  # the registry it was read from, in words
    layers: tuple[tuple[str, int], ...] = ()  # (digest, size), bottom first
    blob: Callable[[str], tuple[int, bytes, dict]] | None = field(default=None, compare=False, repr=False)

    def entry(self, path: str, budget: int = LAYER_BUDGET) -> tarfile.TarInfo | None:
        """The file or folder at `path` (its mode and owner) as the top-most layer that holds it
        says, reading layers from the top while their sizes add up to `budget` at most; None when no
        layer within it holds the path (or one removes it), so the caller cannot tell."""
        name = path.strip("/")
        parent, _, base_name = name.rpartition("/")
        whiteout = f"{parent}/.wh.{base_name}".lstrip("/")
        spent = 0
        for digest, size in reversed(self.layers):
            spent += size
            if spent > budget or self.blob is None:
                return None
            status, data, _ = self.blob(digest)
            if status != 200 or "sha256:" + hashlib.sha256(data).hexdigest() != digest:
                return None
            try:
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
                    for member in tar:
                        member_name = member.name.removeprefix("./").rstrip("/")
                        if member_name == name:
                            return member
                        if member_name == whiteout:
                            return None
            except (tarfile.TarError, OSError, EOFError):
                return None
        return None


class Unreadable(Exception):
    """No registry asked gave the image's config; the message names the image and each one's answer."""


@dataclass(frozen=True)
class Ref:
    host: str  # as the image names it (docker.io for Docker Hub's)
    repository: str
    reference: str  # a tag, or a digest

    @property
    def api(self) -> str:
        return DOCKER_HUB_API if self.host == DOCKER_HUB else self.host


def parse(image: str) -> Ref:
    name = base.qualified(image)
    host, _, rest = name.partition("/")
    if "@" in rest:
        repository, _, reference = rest.partition("@")
    else:
        repository, reference = registry.split(rest)
    return Ref(host, repository, reference)


def walk(get, ref: Ref, image: str, where: str, platform: tuple[str, str] = PLATFORM) -> Found | None:
    """The image's config through `get(path) -> (status, body, headers)`: its manifest, the
    platform's manifest where that is an index, then the config blob (its digest checked), with its
    layers to read on demand. None when the registry does not hold the image; Unreadable for any
    other answer."""
    repo = ref.repository
    status, body, headers = get(f"/v2/{repo}/manifests/{ref.reference}")
    if status == 404:
        return None
    manifest = _json(status, body, image, where, "manifest")
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        entries = [m for m in manifest.get("manifests") or [] if isinstance(m, dict)]
        chosen = next((m for m in entries if (m.get("platform") or {}).get("os") == platform[0]
                       and (m.get("platform") or {}).get("architecture") == platform[1]), None)
        if chosen is None:
            has = sorted({f"{(m.get('platform') or {}).get('os')}/{(m.get('platform') or {}).get('architecture')}"
                          for m in entries})
            raise Unreadable(f"{where} holds {image} for {', '.join(has) or 'no platform'}, not {'/'.join(platform)}")
        status, body, _ = get(f"/v2/{repo}/manifests/{chosen['digest']}")
        manifest = _json(status, body, image, where, "platform's manifest")
    digest = str((manifest.get("config") or {}).get("digest") or "")
    if not digest.startswith("sha256:"):
        raise Unreadable(f"{where} gave a manifest for {image} without a sha256 config digest")
    status, body, _ = get(f"/v2/{repo}/blobs/{digest}")
    blob = _json(status, body, image, where, "config")
    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        raise Unreadable(f"{where} gave a config for {image} that does not match its digest {digest}")
    config = blob.get("config") or {}
    layers = tuple((str(layer.get("digest")), int(layer.get("size") or 0)) for layer in manifest.get("layers") or []
                   if isinstance(layer, dict))
    return Found(ImageConfig(tuple(config.get("Entrypoint") or ()), tuple(config.get("Cmd") or ()),
                             str(config.get("WorkingDir") or ""), str(config.get("User") or "")), where, layers,
                 lambda digest: get(f"/v2/{repo}/blobs/{digest}"))


def _json(status: int, body: bytes, image: str, where: str, what: str) -> dict:
    if status != 200:
        raise Unreadable(f"{where} answered HTTP {status} for {image}'s {what}{errors(body)}")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise Unreadable(f"{where} gave {image}'s {what} as something other than a JSON object")
    return data


def errors(body: bytes) -> str:
    """The registry's own words for a refusal (the distribution spec's `errors` list)."""
    try:
        errors = json.loads(body).get("errors") or []
        said = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        said = body[:200].decode(errors="replace").strip()
    return f" ({said})" if said else ""
