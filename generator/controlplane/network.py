"""This machine's addresses and ports, as the control plane's processes use them."""
from __future__ import annotations

import socket
import subprocess


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def node_ip() -> str:
    """This machine's own non-loopback IPv4 address: the node's InternalIP and every pod's IP.
    Kubernetes refuses loopback endpoints, and processes here listen on every interface."""
    address = ""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.254.254.254", 9))  # sends nothing: only picks the outgoing interface
            address = s.getsockname()[0]
        except OSError:
            pass
    if not address or address.startswith("127."):
        try:
            listing = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True,
                                     text=True).stdout
            address = next((line.split()[3].split("/")[0] for line in listing.splitlines()), "")
        except OSError:
            pass
    if not address or address.startswith("127."):
        raise RuntimeError("this machine has no non-loopback IPv4 address, and Kubernetes refuses loopback "
                           "endpoints; bring up a network interface (even a dummy one) and try again")
    return address
