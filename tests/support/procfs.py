"""What the kernel says of a process, read from /proc: the signals it handles and the ports
listening in its network namespace."""
from __future__ import annotations

from pathlib import Path


def handles(pid: int, signum: int) -> bool:
    """Whether the process has a handler for `signum` (its SigCgt mask). PID 1 of a container
    hears only the signals it handles."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signum - 1)))


def listening_addresses(port: int, pid: int | str = "self") -> list[str]:
    """The local addresses (as /proc writes them, `0100007F:1F90`) of the TCP sockets listening on
    `port` in the network namespace of `pid`."""
    return [fields[1] for table in ("tcp", "tcp6")
            for fields in (row.split() for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:])
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port]


def listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on `port` in the network namespace of `pid`."""
    return bool(listening_addresses(port, pid))
