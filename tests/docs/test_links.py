"""The documentation holds together: every relative link of README.md and docs/ names a
file or folder of the repository (and, with #anchor, a heading of that page), and every page
of docs/ (its data/ aside: the measurements' own notes) is reachable from docs/index.md by
links, so that none is lost to readers."""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    """The targets of the page's Markdown links, outside code."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text("utf-8")))
    return _LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered."""
    found: set[str] = set()
    text = _FENCE.sub("", page.read_text("utf-8"))
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        candidate, number = slug, 0
        while candidate in found:
            number += 1
            candidate = f"{slug}-{number}"
        found.add(candidate)
    return found


def local(page: Path, target: str) -> tuple[Path, str] | None:
    """(path, anchor) of a link to the repository; None for another site or mail."""
    if re.match(r"^[a-z]+:", target):
        return None
    path, _, anchor = target.partition("#")
    return ((page.parent / path).resolve() if path else page), anchor


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        found = local(page, target)
        if found is None:
            continue
        path, anchor = found
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert not broken, broken


def test_every_page_is_reachable_from_the_index() -> None:
    seen = _reachable(DOCS / "index.md")
    pages = [p for p in DOCS.rglob("*.md") if "data" not in p.relative_to(DOCS).parts]
    missing = [str(p.relative_to(DOCS)) for p in pages if p not in seen]
    assert not missing, f"not reachable from docs/index.md: {missing}"
    assert DOCS / "index.md" in {
        found[0] for t in links(REPO / "README.md") if (found := local(REPO / "README.md", t))
    }, "the README links docs/index.md"


def _reachable(start: Path) -> set[Path]:
    seen, todo = {start}, deque([start])
    while todo:
        page = todo.popleft()
        for target in links(page):
            found = local(page, target)
            if found is None or found[0].suffix != ".md" or not found[0].is_file():
                continue
            if found[0] not in seen:
                seen.add(found[0])
                todo.append(found[0])
    return seen
