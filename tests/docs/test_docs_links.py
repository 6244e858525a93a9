"""Every relative link in README.md and docs/ points at a file that exists (and, with an
anchor, at a heading that exists): a reader following the docs never hits a dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            text = re.sub(r"[^\w\- ]", "", text)
            out.add(text.replace(" ", "-"))
    return out


def _links() -> list[tuple[Path, str]]:
    found = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                found.append((doc, target))
    return found


def test_there_are_links_to_check() -> None:
    assert len(_links()) > 20


@pytest.mark.parametrize(
    ("doc", "target"), _links(), ids=lambda v: v if isinstance(v, str) else v.name
)
def test_relative_link_resolves(doc: Path, target: str) -> None:
    file_part, _, anchor = target.partition("#")
    dest = (doc.parent / file_part).resolve() if file_part else doc
    assert dest.exists(), f"{doc.relative_to(ROOT)}: {target} -> missing {dest}"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), (
            f"{doc.relative_to(ROOT)}: no heading #{anchor} in {dest.relative_to(ROOT)}"
        )
