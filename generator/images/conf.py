"""podman's containers.conf for the project's calls: the administrator's settings with the
project's few on top. CONTAINERS_CONF makes podman read one file instead of the machine's (and
Debian's podman 4.3 has no CONTAINERS_CONF_OVERRIDE, which would add to them), so the file it
reads holds the machine's settings too, read in podman's own order."""
from __future__ import annotations

import json
from pathlib import Path

import tomllib

# Where podman run as root reads containers.conf, the later winning (containers.conf(5)).
MACHINE = (Path("/usr/share/containers/containers.conf"), Path("/etc/containers/containers.conf"))
DROP_INS = Path("/etc/containers/containers.conf.d")


def machine_files() -> list[Path]:
    drop_ins = sorted(DROP_INS.glob("*.conf")) if DROP_INS.is_dir() else []
    return [p for p in (*MACHINE, *drop_ins) if p.is_file()]


def _merge(into: dict, more: dict) -> dict:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no TOML for {value!r}")


def _tables(table: dict, name: str, out: list[str]) -> None:
    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    if name and (plain or not table):
        out.append(f"[{name}]")
    out += [f"{json.dumps(k)} = {_value(v)}" for k, v in plain.items()]
    for key, value in table.items():
        if isinstance(value, dict):
            _tables(value, f"{name}.{json.dumps(key)}" if name else json.dumps(key), out)


def text(ours: dict, files: list[Path] | None = None) -> str:
    """The file podman reads: every machine file's settings, then `ours` over them. A machine file
    that is no TOML is left out, as podman would refuse it anyway."""
    merged: dict = {}
    for path in machine_files() if files is None else files:
        try:
            _merge(merged, tomllib.loads(path.read_text()))
        except (OSError, tomllib.TOMLDecodeError):
            continue
    _merge(merged, ours)
    lines: list[str] = []
    _tables(merged, "", lines)
    return "\n".join(lines) + "\n"
