"""One registry over HTTPS, as a pull client talks to it, with the registry v2 token flow and the
login given for it; a refusal or a network fault is Unreadable, in words that name the fix."""
from __future__ import annotations

import base64
import json
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from generator.images import registry
from generator.images.manifests import LAYER_BUDGET, Unreadable, errors

TIMEOUT = 10.0
MAX_BODY = 64 << 10  # of a refusal's body: the registry's error, or the start of a page
LOGIN_FIX = ("give --registry-config FILE, the config.json `docker login` writes (~/.docker/config.json), with a login "
             "for {host}")


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
                                 f"{errors(body)}; " + LOGIN_FIX.format(host=self.host))
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
            raise Unreadable(f"{self.host} could not be reached: {reason(exc, urllib.parse.urlsplit(url).netloc)}") from None

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
                             f"{errors(body)}; " + LOGIN_FIX.format(host=self.host))
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not token:
            raise Unreadable(f"{self.host}'s token service ({params['realm']}) answered without a token")
        return f"Bearer {token}"


def reason(exc: Exception, netloc: str) -> str:
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
