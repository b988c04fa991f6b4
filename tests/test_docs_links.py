"""The documentation holds together: every relative link in README.md and docs/**/*.md points at a path that
exists in the repository (and, for a link to a heading of a Markdown page, at a heading that exists), and the
README stays short enough to read in a few minutes."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 150

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (links there are examples, not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def links(page: Path) -> list[str]:
    """The relative link targets of a Markdown page (absolute URLs and mail addresses left out)."""
    return [t for t in _LINK.findall(_prose(page.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(2)) for m in re.finditer(r"^(#{1,6})\s+(.*?)\s*#*\s*$", _prose(page.read_text()), re.M)}


def broken(page: Path) -> list[str]:
    out = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
            out.append(f"{target} (no heading #{anchor} in {dest.name})")
    return out


def test_the_pages_exist():
    names = {p.relative_to(ROOT).as_posix() for p in _pages()}
    for page in ("docs/usage.md", "docs/workloads.md", "docs/strategies.md", "docs/models.md", "docs/gpu.md",
                 "docs/results.md", "docs/design.md", "docs/decisions/README.md"):
        assert page in names


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    assert broken(page) == []


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; keep it to {README_MAX_LINES} and move detail into docs/"


def test_every_decision_is_indexed():
    decisions = ROOT / "docs" / "decisions"
    indexed = {t.partition("#")[0] for t in links(decisions / "README.md")}
    files = {p.name for p in decisions.glob("*.md") if p.name != "README.md"}
    assert files - indexed == set(), "decision files missing from docs/decisions/README.md"


def test_the_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading\n")
    page.write_text("[ok](there.md) [ok](there.md#a-heading) [bad](missing.md) [bad](there.md#nowhere)\n"
                    "`[code](missing.md)`\n```\n[fenced](missing.md)\n```\n[web](https://example.com/x)\n")
    assert [b.split(" ")[0] for b in broken(page)] == ["missing.md", "there.md#nowhere"]
