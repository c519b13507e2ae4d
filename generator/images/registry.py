"""The registry on this machine as its clients see it: where its folder, address and client
certificate are, and what it holds (images/distribution.py reads an image's config from it).
Beside it runs its read-only twin over the same storage, with a CA and client of its own: the
identity nodes pull with, which can neither push nor delete. Starting and stopping both, and
pushing into the writable one, are controlplane/registry.py's."""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from generator import paths
from generator.errors import UserError

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.distribution.manifest.list.v2+json"])


@dataclass(frozen=True)
class Registry:
    root: Path
    # The read-only twin serves the writable registry's storage; None: this one's own, writable.
    serves: Path | None = None

    @property
    def writable(self) -> bool:
        return self.serves is None

    @property
    def readonly(self) -> Registry:
        """The read-only registry over this one's storage (its folder inside this one's): its CA
        accepts only its own client, whose certificate the writable registry refuses."""
        if not self.writable:
            raise ValueError(f"{self.root}: the read-only registry has no read-only twin of its own")
        return Registry(self.root / "readonly", serves=self.storage)

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def certs(self) -> Path:
        """A client's certificate folder as podman and skopeo read one (`--cert-dir`): the CA as
        ca.crt, the client's pair as client.cert and client.key."""
        return self.root / "certs.d"

    @property
    def config(self) -> Path:
        return self.root / "config.yml"

    @property
    def storage(self) -> Path:
        return self.serves or self.root / "storage"

    @property
    def log(self) -> Path:
        return self.root / "registry.log"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def read_state(self) -> dict:
        try:
            return json.loads(self.state.read_text())
        except (OSError, ValueError):
            return {}

    @property
    def address(self) -> str:
        """host:port of the running registry, '' when none runs."""
        current = self.read_state()
        return f"127.0.0.1:{current['port']}" if current.get("port") and self.pid() else ""

    def pid(self) -> int | None:
        """The registry's process id when it runs (a recorded id reused by another process is not it)."""
        pid = self.read_state().get("pid")
        if not pid or not Path(f"/proc/{pid}").exists():
            return None
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return None
        return pid if str(self.config) in argv else None

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        context.load_cert_chain(str(self.certs / "client.cert"), str(self.certs / "client.key"))
        return context

    def request(self, path: str, method: str = "GET", address: str = "") -> tuple[int, bytes, dict]:
        """(status, body, headers) of a request to the registry's API, as its client."""
        req = urllib.request.Request(f"https://{address or self.address}{path}", method=method,
                                     headers={"Accept": MANIFEST_TYPES})
        try:
            with urllib.request.urlopen(req, context=self.context(), timeout=10) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def has(self, name: str) -> str:
        """The digest the registry holds for the image `name` (repository:tag), '' when none."""
        repo, tag = split(name)
        status, _, headers = self.request(f"/v2/{repo}/manifests/{tag}", method="HEAD")
        return headers.get("Docker-Content-Digest", "") if status == 200 else ""

    def catalog(self) -> list[str]:
        """Every repository:tag the registry holds."""
        status, body, _ = self.request("/v2/_catalog?n=1000")
        if status != 200:
            raise UserError(f"the registry at {self.address} refused its catalog (HTTP {status}): {body[:200]!r}")
        out = []
        for repo in json.loads(body).get("repositories") or []:
            status, body, _ = self.request(f"/v2/{repo}/tags/list")
            out += [f"{repo}:{tag}" for tag in (json.loads(body).get("tags") or [] if status == 200 else [])]
        return sorted(out)


def split(name: str) -> tuple[str, str]:
    """repository:tag -> (repository, tag); a name without a tag is `latest`, as a pull reads it."""
    head, sep, tail = name.rpartition(":")
    if sep and "/" not in tail:
        return head, tail
    return name, "latest"


def default() -> Registry:
    return Registry(paths.cache_dir() / "registry")

