"""Every relative link in the README, the docs and the HyperPod runbook points at a file that
exists, and every `#anchor` at a heading of its page (GitHub's heading ids), so moving a
section cannot leave a dead link behind; and the README, the door, links every docs page.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\[[^\]]+\]:\s*(\S+)", re.M)


def unfenced(text: str) -> str:
    """The text outside fenced code blocks (a `#` comment there is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def prose(text: str) -> str:
    """The text outside code blocks and inline code, where links are links."""
    return re.sub(r"`[^`\n]*`", "", unfenced(text))


def slug(heading: str) -> str:
    """GitHub's id for a heading: markup dropped, lower case, punctuation but `_` dropped,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    ids, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", unfenced(page.read_text()), flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return frozenset(ids)


def links(page: Path) -> list[str]:
    return [a or b for a, b in LINK.findall(prose(page.read_text()))]


def test_slugs_follow_github():
    assert slug("Notebooks and `make demo`") == "notebooks-and-make-demo"
    assert slug("Is it collapsing? Stability signals") == "is-it-collapsing-stability-signals"
    assert slug("SkyRL's trainer on CPU: throughput and learning") == (
        "skyrls-trainer-on-cpu-throughput-and-learning"
    )
    assert slug("Starting vLLM (`model/vllm_engine.py`)") == "starting-vllm-modelvllm_enginepy"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings(page: Path):
    problems = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not problems, f"{page.relative_to(ROOT)}: {problems}"


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
    assert len(links(ROOT / "README.md")) > 10  # the parse is real


CODE_POINTER = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")


def test_the_codes_pointers_into_docs_name_real_headings():
    """A `docs/page.md#anchor` in rlkit/, benchmarks/ or scripts/ names a heading of that page:
    prose moved out of the code stays findable from it."""
    problems = []
    for path in sorted(
        p for d in ("rlkit", "benchmarks", "scripts") for p in (ROOT / d).rglob("*.py")
    ):
        for page, anchor in CODE_POINTER.findall(path.read_text()):
            file = ROOT / "docs" / page
            if not file.exists() or anchor not in anchors(file):
                problems.append(f"{path.relative_to(ROOT)}: docs/{page}#{anchor}")
    assert not problems, problems
