"""experiments/results/ and docs/: every relative link points to a file that exists, every
note is in the index, and every archive path a note names is in experiments/archive/."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTES = ROOT / "experiments" / "results"
PAGES = sorted(NOTES.glob("*.md")) + sorted((ROOT / "docs").rglob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
ARCHIVED = re.compile(r"experiments/archive/[A-Za-z0-9_./\-]*[A-Za-z0-9_/]")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)}: {target}"


def test_every_note_is_in_the_index():
    index = (NOTES / "README.md").read_text()
    for note in NOTES.glob("*.md"):
        if note.name != "README.md":
            assert f"]({note.name})" in index, note.name


@pytest.mark.parametrize("page", sorted(NOTES.glob("*.md")), ids=lambda p: p.name)
def test_archive_paths_exist(page):
    text = page.read_text()
    for match in ARCHIVED.finditer(text):
        if text[match.end():match.end() + 1] in "{*<" or "<" in match.group():
            continue  # a pattern (braces, globs, <study>), not one path
        assert (ROOT / match.group()).exists(), f"{page.name}: {match.group()}"
