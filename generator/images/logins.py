"""The logins `docker login` writes into a config.json (`--registry-config`), read by registry host."""
from __future__ import annotations

import base64
import binascii
import json
import urllib.parse
from pathlib import Path

from generator.errors import UserError
from generator.images.manifests import DOCKER_HUB

DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io")  # how logins name it


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
