"""Every relative link and image in the Markdown docs resolves: the file exists and, with ``#anchor``, the target
file has a heading with that anchor (GitHub's rule: lower-case, punctuation other than ``-`` and ``_`` dropped,
spaces to hyphens; a repeated heading gets ``-1``, ``-2``, ...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "benchmarks").glob("*.md")), *sorted((REPO / "docs").glob("**/*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"`|\*\*?|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading anchors by its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path):
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def test_slug_follows_githubs_rule():
    assert slug("SmolLM2-135M: a real pretrained model") == "smollm2-135m-a-real-pretrained-model"
    assert slug("Krony-PT (Kronecker-factored MLPs, 2024)") == "krony-pt-kronecker-factored-mlps-2024"
    assert slug("Scaling up: paper-scale dry runs and real weights") == "scaling-up-paper-scale-dry-runs-and-real-weights"


def broken_links(doc: Path) -> list[str]:
    """The relative links and images of ``doc`` whose file or heading does not exist, one line each."""
    broken = []
    for line in prose_lines(doc):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            file = (doc.parent / path_part).resolve() if path_part else doc
            if not file.exists():
                broken.append(f"{target}: no file {file}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{target}: no heading #{anchor} in {file.name}")
    return broken


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    doc = tmp_path / "doc.md"
    (tmp_path / "there.png").write_bytes(b"")
    doc.write_text("# Top\n\n## Top\n\n[a](#top) [b](#top-1) ![c](there.png) [d](https://x.org/#y)\n"
                   "[e](gone.md) [f](#nowhere) [g](doc.md#top)\n\n```\n[h](in-code.md)\n```\n")
    assert broken_links(doc) == [f"gone.md: no file {tmp_path / 'gone.md'}", "#nowhere: no heading #nowhere in doc.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(REPO)}:\n" + "\n".join(broken)
