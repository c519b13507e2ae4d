"""The documentation as a reader follows it: every relative link in README.md and docs/ reaches a
file (and, for a `#fragment`, a heading of that page, spelled as GitHub spells its anchors), the
README stays a front door, and every page is one of its links."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ROOT, docs

PAGES = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted(docs.DOCS.glob("*.md"))]
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    out = set()
    for _line, found in docs.lines_of(page.read_text()):
        if not found:
            continue
        slug = re.sub(r"[^\w\- ]", "", found[1].strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(page: Path) -> list[str]:
    text = "".join(line for line, _ in docs.lines_of(page.read_text()) if not line.startswith("    "))
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # what a code block shows is not a link
    return [target for target in _LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def broken(page: Path) -> list[str]:
    problems = []
    for target in links(page):
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            problems.append(f"{target}: no such file {dest}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: {dest.name} has no heading with the anchor #{fragment}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_a_broken_link_and_a_missing_anchor_are_both_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [no anchor](#nothing)\n```\n[code](skipped.md)\n```\n")
    assert broken(page) == [f"missing.md: no such file {tmp_path / 'missing.md'}",
                            "#nothing: page.md has no heading with the anchor #nothing"]


def test_the_readme_is_a_front_door_that_links_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    head = "\n".join(readme.splitlines()[:80])
    assert "$ make demo" in head and "$ make test" in head
    linked = {target.partition("#")[0] for target in links(ROOT / "README.md")}
    assert {f"docs/{p.name}" for p in docs.DOCS.glob("*.md")} <= linked


def test_figures_that_change_from_run_to_run_are_on_one_page():
    """CI times (`31m05`) and test counts (`216 tests`) are recorded in docs/testing.md alone."""
    figure = re.compile(r"\b\d+m\d\d\b|\b\d+ (?:e2e )?tests\b")
    elsewhere = [p.name for p in PAGES if p.name != "testing.md" and figure.search(p.read_text())]
    assert elsewhere == []
    assert figure.search((docs.DOCS / "testing.md").read_text())
