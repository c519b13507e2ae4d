"""Free ports on this machine: `generator run` gives its Master and rendezvous one each, and the
control plane its components."""
from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's choice); the caller binds it soon after."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
