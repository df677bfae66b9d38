"""Issue 38: the documentation is kept true by the tests. The site builds with
``mkdocs build --strict`` (a broken link, anchor, include or API reference fails it);
every page says what it covers in its first lines; the benchmark page's figures come
from the published result files; every public name has its reference entry; the README
stays short, its links lead somewhere, and nothing names an internal milestone where a
date, a version or a machine belongs. (That every Python block of the docs runs is
tests/test_readme.py's work, with the same mechanism as the README's: each block in a
fresh interpreter with nothing injected, or marked a fragment, #51.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from readme_blocks import INDENTED, OTHER_FENCE, README, ROOT, sources

import aiosb
import aiosb.bridge
from benchmarks import docs_page

DOCS = ROOT / "docs"
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\d+))?')


@pytest.mark.timeout(300)
def test_the_site_builds_strictly(site: Path):
    assert (site / "index.html").exists()
    assert (site / "reference" / "client" / "index.html").exists()


def _nav_pages() -> list[str]:
    def walk(entries: list[object]) -> list[str]:
        pages = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            pages += walk(value) if isinstance(value, list) else [str(value)]
        return pages

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    return walk(config["nav"])


def _text_as_built(page: Path) -> str:
    """The page with a leading snippet include replaced by the lines it includes."""
    text = page.read_text()
    lines = text.splitlines()
    first = SNIPPET.match(lines[0]) if lines else None
    if first is None:
        return text
    included = (ROOT / first.group(1)).read_text().splitlines()[int(first.group(2) or 1) - 1:]
    return "\n".join([*included, *lines[1:]])


@pytest.mark.parametrize("page", _nav_pages())
def test_every_page_says_what_it_covers_in_its_first_lines(page: str):
    lines = [line for line in _text_as_built(DOCS / page).splitlines() if line.strip()]
    assert lines[0].startswith("# "), f"{page} starts with {lines[0]!r}, not its title"
    first = lines[1]
    assert not first.startswith(("#", "```", "!", "|", "-", "<", ":::")), (
        f"{page}: after the title comes {first!r}, not a sentence saying what it covers"
    )


def test_every_page_is_in_the_navigation():
    listed = set(_nav_pages())
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - listed == set()


def test_no_python_block_hides_from_the_tests_by_being_indented():
    """tests/test_readme.py runs blocks at the left margin only."""
    assert [str(p) for p in sources() if INDENTED.search(p.read_text())] == []


def test_no_python_block_hides_from_the_tests_behind_another_fence_name():
    """#51: tests/test_readme.py runs ```python blocks; one fenced ```py would go unrun,
    and a reader copying it could meet the NameError no test saw."""
    assert [str(p) for p in sources() if OTHER_FENCE.search(p.read_text())] == []


def test_every_public_name_has_its_reference_entry():
    """Each name aiosb and aiosb.bridge export is rendered by a ``:::`` directive of its
    own (under any module that exports it), or by its whole module's (aiosb.errors)."""
    entries = "\n".join(p.read_text() for p in (DOCS / "reference").glob("*.md"))
    directives = set(re.findall(r"^::: ([\w.]+)$", entries, re.M))
    whole = {"aiosb.errors": aiosb.errors}
    names = [n for n in aiosb.__all__ if n not in ("__version__", "errors")]
    names += list(aiosb.bridge.__all__)
    missing = [
        n for n in names
        if not any(d.endswith(f".{n}") for d in directives)
        and not any(m in directives and hasattr(module, n) for m, module in whole.items())
    ]
    assert missing == []
    for module in ("aiosb.errors", "aiosb.testing", "aiosb.telemetry", "aiosb.spark",
                   "aiosb.server.http.serve", "aiosb.emulator.Faults",
                   "aiosb.pairing.health"):
        assert module in directives


def test_the_benchmark_figures_are_made_from_the_published_results(site: Path):
    results = docs_page.load()
    assert results, "no result files in docs/benchmark-results/"
    source = (DOCS / docs_page.PAGE).read_text()
    assert docs_page.MARKER in source
    assert not re.search(r"\b(PASS|MISS)\b", source), "figures written by hand"
    built = (site / "benchmarks" / "index.html").read_text()
    for result in results:
        assert f'id="result-{result["benchmark"].replace("_", "-")}"' in built
        assert f"with aiosb {result['aiosb']} and Python {result['python']}" in built
        for check in result["checks"]:
            assert check["target"].replace("<", "&lt;").replace(">", "&gt;") in built
    assert "MISS" in built or "PASS" in built


def test_the_benchmark_hook_refuses_a_page_that_lost_its_marker():
    class Page:
        class file:  # the shape of mkdocs' Page.file
            src_uri = docs_page.PAGE

    with pytest.raises(ValueError, match="lost its line"):
        docs_page.on_page_markdown("# Benchmarks\n", Page, {"docs_dir": str(DOCS)}, None)


def test_the_readme_is_short_and_gets_a_newcomer_going():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "./dev demo" in text and "./dev test" in text
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which is not there"


@pytest.mark.parametrize("path", [README, *sorted(DOCS.rglob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_milestone_where_a_date_version_or_machine_belongs(path: Path):
    text = path.read_text()
    for pattern in (r"[Ll]ast figures", r"\bthe machine of\b", r"\bat (commit )?[0-9a-f]{7}\b",
                    r"\b[Rr]ound \d", r"\b[Ss]ession \d+\b", r"\bthe run before\b"):
        assert not re.search(pattern, text), f"{path.name}: {pattern}"
