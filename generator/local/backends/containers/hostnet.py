"""What podman changes on this machine for `run --container`, put back after the run. Its CNI
bridge plugin turns on net.ipv4.ip_forward, and its firewall plugin makes the CNI-FORWARD chain
(jumped to from FORWARD) and CNI-ADMIN in it (jumped to from CNI-FORWARD), removing neither
when the last container goes.

The machine as it was is recorded before the first of the runs going at once and undone when the
last ends (a run killed with SIGKILL is let go by its watcher, or by the next run): only what
was not so before, and only what no one else uses now. ip_forward stays on where CNI-FORWARD
holds another container's rules that were not there before; a chain stays where it holds any
rule but the plugin's own jump (CNI-ADMIN is the administrator's: any rule in it is theirs).
Root with podman alone: rootless podman changes neither, and Docker keeps its own."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from generator import files
from generator.container import machine
from generator.images import engine as engine_

RECORD = Path("/run/pytorchjob-kit/container-runs.json")  # one per machine: the runs share FORWARD
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
FORWARD, PRIVATE, ADMIN = "FORWARD", "CNI-FORWARD", "CNI-ADMIN"
CHAINS = (FORWARD, PRIVATE, ADMIN)


@dataclass(frozen=True)
class Host:
    """ip_forward as /proc reads it, and the `-A` lines of each of CHAINS that exists, as
    `iptables -S CHAIN` lists them (none listed where iptables is missing)."""
    ip_forward: str
    rules: dict[str, list[str]] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"ip_forward": self.ip_forward, "rules": self.rules}

    @classmethod
    def of_json(cls, raw: dict) -> Host:
        return cls(str(raw.get("ip_forward", "")), {k: list(v) for k, v in (raw.get("rules") or {}).items()})


@dataclass(frozen=True)
class Undo:
    ip_forward: str | None  # the value to write back; None: left as it is
    commands: list[list[str]]  # iptables arguments, in order
    kept: list[str]  # what is left changed, and why, for the user


def _jumps(rules: list[str], chain: str) -> list[str]:
    return [r for r in rules if shlex.split(r)[-2:] == ["-j", chain]]


def _new(before: Host, now: Host, chain: str) -> list[str]:
    return [r for r in now.rules.get(chain, []) if r not in before.rules.get(chain, [])]


def undo(before: Host, now: Host) -> Undo:
    """What to put back, from the machine before the first run and now, after the last: the
    chains the runs made and the jumps to them, and ip_forward where it was off, unless a rule
    that is not the plugin's own jump came into CNI-FORWARD or CNI-ADMIN meanwhile (another
    container's, each has two; or an administrator's): then the machine is left as it is."""
    foreign = [r for r in _new(before, now, PRIVATE) if not _jumps([r], ADMIN)] + _new(before, now, ADMIN)
    ip_forward = "0" if before.ip_forward == "0" and now.ip_forward == "1" else None
    # Without iptables at the first run's start, the chains there before are unknown: they stay.
    made = [c for c in (PRIVATE, ADMIN) if c in now.rules and c not in before.rules and FORWARD in before.rules]
    if foreign:
        why = f"{len(foreign)} rules of other containers or of an administrator are in {PRIVATE} or {ADMIN}"
        kept = [*made, *(["net.ipv4.ip_forward=1"] if ip_forward else [])]
        return Undo(None, [], [f"{', '.join(kept)} ({why})"] if kept else [])
    commands = []
    if PRIVATE in made:
        commands += [["-D", *shlex.split(r)[1:]] for r in _jumps(_new(before, now, FORWARD), PRIVATE)]
        commands += [["-F", PRIVATE], ["-X", PRIVATE]]
    elif ADMIN in made:  # CNI-FORWARD was there before: only the jump the runs' plugin added into it goes
        commands += [["-D", *shlex.split(r)[1:]] for r in _jumps(_new(before, now, PRIVATE), ADMIN)]
    if ADMIN in made:
        commands.append(["-X", ADMIN])  # empty: any rule in it would have been foreign
    return Undo(ip_forward, commands, [])


def applies(engine: str) -> bool:
    """Root's podman: the one that changes the machine's forwarding (rootless podman has a
    namespace of its own; Docker's daemon keeps what it sets)."""
    return engine == engine_.PODMAN and os.geteuid() == 0


def read(run: Callable = subprocess.run) -> Host:
    rules: dict[str, list[str]] = {}
    iptables = machine.iptables()
    for chain in CHAINS if iptables else ():
        listed = run([str(iptables), "-w", "5", "-S", chain], capture_output=True, text=True)
        if listed.returncode == 0:
            rules[chain] = [line for line in listed.stdout.splitlines() if line.startswith("-A ")]
    return Host(IP_FORWARD.read_text().strip(), rules)


def hold(owner: str, alive: Callable[[str], bool], record: Path = RECORD) -> None:
    """Record the machine before this run's containers start, unless a run going now (or one
    killed before it could let go) recorded it already, and add `owner` to the runs holding it."""
    with files.record_lock(record):
        held = _load(record)
        if not held:
            held = {"before": read().as_json(), "holders": []}
        held["holders"] = [h for h in held["holders"] if alive(h) and h != owner] + [owner]
        files.write_whole(record, json.dumps(held, indent=1, sort_keys=True), 0o600)


def release(owner: str, alive: Callable[[str], bool], record: Path = RECORD, say=print) -> None:
    """`owner` lets go; the last run to let go puts back what the runs changed, and says what."""
    with files.record_lock(record):
        held = _load(record)
        if not held or owner not in held["holders"]:
            return
        held["holders"] = [h for h in held["holders"] if h != owner and alive(h)]
        if held["holders"]:
            files.write_whole(record, json.dumps(held, indent=1, sort_keys=True), 0o600)
            return
        todo = undo(Host.of_json(held["before"]), read())
        done = put_back(todo)
        record.unlink()
    if done:
        say(f"put back what podman changed for the run: {'; '.join(done)}")
    if todo.kept:
        say(f"note: left as podman changed them: {'; '.join(todo.kept)}")


def put_back(todo: Undo, run: Callable = subprocess.run) -> list[str]:
    """Apply `todo`; what was done, in words."""
    done = []
    if todo.ip_forward is not None:
        IP_FORWARD.write_text(todo.ip_forward)
        done.append(f"net.ipv4.ip_forward={todo.ip_forward}")
    iptables = machine.iptables()
    removed = []
    for args in todo.commands if iptables else ():
        if run([str(iptables), "-w", "5", *args], capture_output=True).returncode == 0 and args[0] == "-X":
            removed.append(args[1])
    if removed:
        done.append(f"iptables chains {', '.join(removed)} removed")
    return done


def _load(record: Path) -> dict:
    try:
        held = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) and "before" in held and isinstance(held.get("holders"), list) else {}
