"""An image's config (its ENTRYPOINT, CMD, WORKDIR and USER) read through the OCI distribution
API, as a pull reads it: the registry on this machine first (it holds images under their upstream
names), then the image's own registry over HTTPS (remote.py), with the registry v2 token flow and
the credentials `docker login` writes into a config.json (logins.py). Only the manifest and the
config blob are fetched (manifests.py), never a layer."""
from __future__ import annotations

import os
import urllib.error
from dataclasses import dataclass, field

from generator.images import registry
from generator.images.logins import load_auths
from generator.images.manifests import Found, Ref, Unreadable, parse, walk
from generator.images.remote import Remote, reason

# Set (to anything but empty or 0), only the registry on this machine is asked: air-gapped CI,
# or reports that must not change with what the internet serves.
OFFLINE_ENV = "PYTORCHJOB_KIT_OFFLINE"
HERE = "the registry on this machine"


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
                said.append(f"{HERE} could not be reached ({reason(exc, local.address)})")
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
