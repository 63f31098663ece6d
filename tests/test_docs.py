"""Every relative link in README.md and docs/*.md leads somewhere: the file exists, and a #anchor is a
heading of that page as GitHub names it (lowercase, punctuation dropped except - and _, spaces to
hyphens, a repeated heading's name suffixed -1, -2, ...)."""
import re

import pytest

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text):
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, names = {}, set()
    for line in prose_lines(path.read_text()):
        if m := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line):
            base = slug(m.group(1))
            names.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return names


def links(path):
    for line in prose_lines(path.read_text()):
        yield from LINK.findall(INLINE_CODE.sub("", line))


def test_slugs_follow_github():
    assert slug("Memory modes: 6.7B on 80 GB, 2.7B on 48 GB") == "memory-modes-67b-on-80-gb-27b-on-48-gb"
    assert slug("Measuring: `scripts/bench.py`") == "measuring-scriptsbenchpy"
    assert slug("GPT-2 and **Hugging Face** in and out") == "gpt-2-and-hugging-face-in-and-out"
    assert slug("train_gpt3_6b.py, [the config](x.md)") == "train_gpt3_6bpy-the-config"


def test_duplicate_headings_are_numbered(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Notes\n## Notes\n```\n# not a heading\n```\n## Notes\n")
    assert anchors(page) == {"notes", "notes-1", "notes-2"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... are not checked offline
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)
