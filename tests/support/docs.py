"""The one way tests read the documentation: a page of docs/ (or README.md), the section under a
heading, and the fenced blocks in it. Every sample a page shows is cut out here and compared with what
the command prints, so moving a section between pages changes one argument, not a test's parsing."""
from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT

DOCS = ROOT / "docs"
_HEADING = re.compile(r"^(#{1,6}) (.*)$")


def path(page: str) -> Path:
    """README.md at the top, every other page under docs/."""
    return ROOT / page if page == "README.md" else DOCS / page


def lines_of(text: str):
    """(line, heading level or 0) for each line, fenced code never read as a heading."""
    fenced = False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line.rstrip("\n"))
        yield line, (len(match.group(1)), match.group(2)) if match else None


def section(page: str, heading: str) -> str:
    """The text under the first heading that starts with `heading` (its #s left out), up to the next
    heading of the same or a higher level."""
    out: list[str] = []
    level = 0
    for line, found in lines_of(path(page).read_text()):
        if level and found and found[0] <= level:
            break
        if level:
            out.append(line)
        elif found and found[1].startswith(heading.lstrip("# ")):
            level = found[0]
    if not level:
        raise AssertionError(f"{path(page)} has no heading starting {heading!r}")
    return "".join(out)


def blocks(page: str, heading: str, fence: str = "console") -> list[str]:
    """Every ```fence block of the section, without its fences."""
    return re.findall(rf"^```{fence}\n(.*?)^```", section(page, heading), re.S | re.M)


def block(page: str, heading: str, fence: str = "console", after: str = "") -> str:
    """The section's first ```fence block (the first after the text `after`, when given)."""
    text = section(page, heading)
    if after:
        text = text.split(after, 1)[1]
    found = re.search(rf"^```{fence}\n(.*?)^```", text, re.S | re.M)
    if found is None:
        raise AssertionError(f"{path(page)}: no ```{fence} block under {heading!r}" + (f" after {after!r}" if after else ""))
    return found.group(1)


def command_lines(block_text: str, prefix: str) -> list[str]:
    """The block's lines that start with `prefix`, continuation lines joined and trailing `  #` comments cut."""
    joined = block_text.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.startswith(prefix)]


def console_steps(block_text: str) -> list[tuple[str, str]]:
    """(command, the output the page shows for it) for each `$ ` line of a console block, in order."""
    out: list[tuple[str, list[str]]] = []
    for line in block_text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            out[-1][1].append(line)
    return [(command, "\n".join(lines)) for command, lines in out]
