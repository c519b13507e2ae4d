"""An image's config (its ENTRYPOINT, CMD, WORKDIR and USER) read through the OCI distribution
API, as a pull reads it: the registry on this machine first (it holds images under their upstream
names), then the image's own registry over HTTPS, with the registry v2 token flow and the
credentials `docker login` writes into a config.json. Only the manifest and the config blob are
fetched, never a layer."""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import os
import re
import socket
import ssl
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import UserError
from generator.images import base, registry

# Set (to anything but empty or 0), only the registry on this machine is asked: air-gapped CI,
# or reports that must not change with what the internet serves.
OFFLINE_ENV = "PYTORCHJOB_KIT_OFFLINE"
HERE = "the registry on this machine"
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"  # docker.io's names are served from here
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io")  # how logins name it
PLATFORM = ("linux", "amd64")
TIMEOUT = 10.0
# The layers read to find a folder's owner and mode, from the top: a few small ones (a COPY, a
# useradd) are cheap; a base or a pip install of torch (gigabytes) is not, and is never read.
LAYER_BUDGET = 16 << 20
MAX_BODY = 64 << 10  # of a refusal's body: the registry's error, or the start of a page
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
LOGIN_FIX = ("give --registry-config FILE, the config.json `docker login` writes (~/.docker/config.json), with a login "
             "for {host}")


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


def load_auths(path: str) -> dict[str, tuple[str, str]]:
    """registry host -> (user, password) from a docker config.json (`auths` -> base64 of user:password,
    or its username and password); every fault names the file and the fix."""
    file = Path(path)
    redo = "run `docker login HOST` (or `podman login --authfile FILE HOST`) to write it again"
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise UserError(f"--registry-config {path}: no such file; give the config.json `docker login` writes "
                        "(~/.docker/config.json), or leave the option out to read images without a login") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--registry-config {path}: cannot be read ({exc}); give a readable config.json") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserError(f"--registry-config {path}: not JSON ({exc}); a docker config.json is "
                        '{"auths": {"HOST": {"auth": "BASE64 of USER:PASSWORD"}}}; ' + redo) from None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        raise UserError(f"--registry-config {path}: has no `auths` object, so no login to use; a docker config.json "
                        'is {"auths": {"HOST": {"auth": "BASE64 of USER:PASSWORD"}}}; ' + redo)
    out = {}
    for key, entry in auths.items():
        host = _host_of(key)
        if not isinstance(entry, dict):
            raise UserError(f"--registry-config {path}: auths.{key} is not an object; {redo}")
        if entry.get("auth"):
            try:
                pair = base64.b64decode(str(entry["auth"]), validate=True).decode()
            except (binascii.Error, ValueError):
                raise UserError(f"--registry-config {path}: auths.{key}.auth is not base64 (got "
                                f"{str(entry['auth'])[:20]!r}); write it as the output of `printf %s USER:PASSWORD | "
                                f"base64 -w0`, or {redo}") from None
            user, sep, password = pair.partition(":")
            if not sep:
                raise UserError(f"--registry-config {path}: auths.{key}.auth decodes to no USER:PASSWORD (no colon); "
                                f"write it as the output of `printf %s USER:PASSWORD | base64 -w0`, or {redo}")
            out[host] = (user, password)
        elif entry.get("username") and entry.get("password"):
            out[host] = (str(entry["username"]), str(entry["password"]))
    return out


def _host_of(key: str) -> str:
    """The host a login's key names: `https://index.docker.io/v1/` is Docker Hub's, others may carry a scheme or path."""
    if key in DOCKER_HUB_KEYS or key.rstrip("/") in DOCKER_HUB_KEYS:
        return DOCKER_HUB
    host = urllib.parse.urlsplit(key).netloc if "://" in key else key.split("/", 1)[0]
    return DOCKER_HUB if host in DOCKER_HUB_KEYS else host


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
        raise Unreadable(f"{where} answered HTTP {status} for {image}'s {what}{_errors(body)}")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise Unreadable(f"{where} gave {image}'s {what} as something other than a JSON object")
    return data


def _errors(body: bytes) -> str:
    """The registry's own words for a refusal (the distribution spec's `errors` list)."""
    try:
        errors = json.loads(body).get("errors") or []
        said = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        said = body[:200].decode(errors="replace").strip()
    return f" ({said})" if said else ""


@dataclass
class Remote:
    """One registry over HTTPS, as a pull client talks to it: anonymously first; on 401, the
    challenge's scheme (Bearer: a token from its realm for the repository's pull scope, with the
    login where one is given; Basic: the login)."""
    host: str
    api: str
    login: tuple[str, str] | None = None
    authorization: str = ""
    timeout: float = TIMEOUT

    def get(self, path: str, repo: str) -> tuple[int, bytes, dict]:
        status, body, headers = self._send(f"https://{self.api}{path}", self.authorization)
        if status == 401:
            self.authorization = self._authorize(headers.get("WWW-Authenticate") or headers.get("Www-Authenticate") or "",
                                                 repo)
            status, body, headers = self._send(f"https://{self.api}{path}", self.authorization)
            if status == 401:
                raise Unreadable(f"{self.host} refused {'the login given for it' if self.login else 'an anonymous pull'}"
                                 f"{_errors(body)}; " + LOGIN_FIX.format(host=self.host))
        return status, body, headers

    def _send(self, url: str, authorization: str) -> tuple[int, bytes, dict]:
        req = urllib.request.Request(url, headers={"Accept": registry.MANIFEST_TYPES})
        if authorization:
            # Not carried over a redirect: blobs are often served from another host (a CDN's signed URL).
            req.add_unredirected_header("Authorization", authorization)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=ssl.create_default_context()) as resp:
                return resp.status, resp.read(LAYER_BUDGET), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(MAX_BODY), dict(exc.headers)
        except (urllib.error.URLError, OSError) as exc:
            raise Unreadable(f"{self.host} could not be reached: {_reason(exc, urllib.parse.urlsplit(url).netloc)}") from None

    def _authorize(self, challenge: str, repo: str) -> str:
        scheme = challenge.split(" ", 1)[0].lower()
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        if scheme == "basic":
            if not self.login:
                raise Unreadable(f"{self.host} asks for a login; " + LOGIN_FIX.format(host=self.host))
            return "Basic " + base64.b64encode(":".join(self.login).encode()).decode()
        if scheme != "bearer" or not params.get("realm", "").startswith(("https://", "http://")):
            raise Unreadable(f"{self.host} answered 401 with a challenge this client does not follow: {challenge[:200]!r}")
        query = {"service": params.get("service", ""), "scope": f"repository:{repo}:pull"}
        url = params["realm"] + ("&" if "?" in params["realm"] else "?") + urllib.parse.urlencode(
            {k: v for k, v in query.items() if v})
        basic = "Basic " + base64.b64encode(":".join(self.login).encode()).decode() if self.login else ""
        status, body, _ = self._send(url, basic)
        if status != 200:
            raise Unreadable(f"{self.host}'s token service ({params['realm']}) refused "
                             f"{'the login given for it' if self.login else 'an anonymous pull'} (HTTP {status})"
                             f"{_errors(body)}; " + LOGIN_FIX.format(host=self.host))
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not token:
            raise Unreadable(f"{self.host}'s token service ({params['realm']}) answered without a token")
        return f"Bearer {token}"


def _reason(exc: Exception, netloc: str) -> str:
    """A network fault in words that do not change with the machine's resolver or errno."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve {netloc.split(':')[0]}"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({reason.verify_message})"
    if isinstance(reason, ConnectionRefusedError):
        return f"nothing listens at {netloc}"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within {TIMEOUT:g} s"
    return str(reason)


@dataclass
class Reader:
    """Reads images' configs for one command, each image once; `auths` from --registry-config."""
    auths: dict[str, tuple[str, str]] = field(default_factory=dict)
    local: registry.Registry | None = None
    remote: bool = field(default_factory=lambda: os.environ.get(OFFLINE_ENV, "") in ("", "0"))
    _seen: dict[str, Found | Unreadable] = field(default_factory=dict)
    _remotes: dict[str, Remote] = field(default_factory=dict)

    @classmethod
    def from_option(cls, path: str | None) -> Reader:
        return cls(load_auths(path) if path else {})

    def config(self, image: str) -> Found:
        if image not in self._seen:
            try:
                self._seen[image] = self._read(image)
            except Unreadable as exc:
                self._seen[image] = exc
        found = self._seen[image]
        if isinstance(found, Unreadable):
            raise found
        return found

    def _read(self, image: str) -> Found:
        ref = parse(image)
        name = f"{ref.host}/{ref.repository}"
        local = self.local or registry.default()
        said = []
        if ":" in ref.host:
            pass  # a repository name holds no colon, so the registry here holds no image of a host:port
        elif local.address:
            try:
                # It holds each image under its full upstream name, the host as the repository's first part.
                got = walk(lambda path: local.request(path), Ref(ref.host, name, ref.reference), image, HERE)
            except (urllib.error.URLError, OSError) as exc:
                said.append(f"{HERE} could not be reached ({_reason(exc, local.address)})")
            except Unreadable as exc:
                said.append(str(exc))
            else:
                if got:
                    return got
                said.append(f"{HERE} does not hold it")
        else:
            said.append(f"{HERE} is not running (`python -m generator image registry up` starts it)")
        if not self.remote:
            raise Unreadable(f"{image}: " + "; ".join([*said, f"other registries are not asked offline ({OFFLINE_ENV})"]))
        remote = self._remotes.setdefault(ref.host, Remote(ref.host, ref.api, self.auths.get(ref.host)))
        try:
            got = walk(lambda path: remote.get(path, ref.repository), ref, image, ref.host)
        except Unreadable as exc:
            raise Unreadable(f"{image}: " + "; ".join([*said, str(exc)])) from None
        if not got:
            raise Unreadable(f"{image}: " + "; ".join([*said, f"{ref.host} has no such image ({ref.repository}:"
                                                       f"{ref.reference})"]))
        return got
