"""Whether a user of this machine reaches an address: a TCP connect, or a UDP datagram answered
(a DNS query, which CoreDNS answers and an echo returns), run as that user. Another user is
uid 65534 with no groups, as the security tests' attacker."""
from __future__ import annotations

import json
import subprocess
import textwrap

NOBODY = 65534

SCRIPT = """
import json, socket, struct, sys

def query():
    # A DNS query for the API server's Service, as a pod's resolver sends it.
    name = b"".join(bytes([len(p)]) + p for p in b"kubernetes.default.svc.cluster.local".split(b".")) + b"\\0"
    return struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + name + struct.pack("!HH", 1, 1)

out = {}
for kind, host, port in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(10)
    try:
        s.connect((host, port))
        if kind == "udp":
            s.send(query())
            s.recv(512)
        out[f"{kind} {host}:{port}"] = "answered"
    except OSError as e:
        out[f"{kind} {host}:{port}"] = type(e).__name__
    finally:
        s.close()
print(json.dumps(out))
"""


def reach(targets: list[tuple[str, str, int]], uid: int = 0) -> dict[str, str]:
    """`"KIND HOST:PORT"` -> "answered" or the error's name (ConnectionRefusedError, PermissionError:
    a firewall's reject), for each (kind, host, port), tried by `uid` (0: this process's user). The
    machine's own python3, which every user may run and which needs nothing but the standard library."""
    argv = ["/usr/bin/python3", "-c", textwrap.dedent(SCRIPT), json.dumps(targets)]
    if uid:
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
