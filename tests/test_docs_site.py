"""Issue #51: the built site as a reader sees it. The API reference shows the docstrings'
Sphinx roles as links (or as code where no page renders the target), never as raw
``:class:`...``` text, and no private import alias (``_dt.timedelta``) in a signature; the
benchmark page's charts are drawn from the published results and every missed target
is commented."""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import griffe
import pytest

from benchmarks import docs_page

ROOT = Path(__file__).parent.parent
RAW_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj|const):(?:<code>|`)")
PRIVATE_ALIAS = re.compile(r'<span class="n">_[a-z]\w*</span><span class="o">\.</span>')
PRIVATE_DEFAULT = re.compile(  # "= _MINUTE", "= 2 * _MINUTE"
    r'<span class="o">=</span> (?:<span class="mi">\d+</span> <span class="o">\*</span> )?'
    r'<span class="n">_[A-Z][A-Z0-9_]*</span>')


def _extension() -> ModuleType:
    path = ROOT / "docs" / "hooks" / "sphinx_roles.py"
    spec = importlib.util.spec_from_file_location("sphinx_roles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference_pages(site: Path) -> list[Path]:
    pages = sorted((site / "reference").glob("*/index.html"))
    assert len(pages) >= 9
    return pages


@pytest.mark.timeout(300)
def test_the_reference_shows_no_raw_sphinx_role(site: Path):
    raw = {page.parent.name: RAW_ROLE.findall(page.read_text())
           for page in _reference_pages(site)}
    assert {name: found for name, found in raw.items() if found} == {}
    links = sum(page.read_text().count('class="autorefs autorefs-internal"')
                for page in _reference_pages(site))
    assert links > 100, "the roles became code, not links"


@pytest.mark.timeout(300)
def test_no_signature_shows_a_private_import_alias_or_constant(site: Path):
    shown = {page.parent.name: PRIVATE_ALIAS.findall(page.read_text())
             + PRIVATE_DEFAULT.findall(page.read_text()) for page in _reference_pages(site)}
    assert {name: found for name, found in shown.items() if found} == {}
    client = (site / "reference" / "client" / "index.html").read_text()
    assert '<span class="n">datetime</span><span class="o">.</span>' in client


def test_roles_resolve_as_sphinx_reads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The translation itself, on a package of its own: relative, scoped, tilde and titled
    roles become links where the reference renders the target, code elsewhere."""
    roles = _extension()
    package = tmp_path / "rolespkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "_hidden.py").write_text('"""Private."""\n')
    (package / "sub" / "__init__.py").write_text('"""A subpackage."""\n')
    (package / "sub" / "codec.py").write_text(
        '"""Codec: :mod:`.codec`, :mod:`..sub`, :class:`~rolespkg.sub.codec.Thing`,\n'
        ':meth:`Thing.go`, :meth:`the go <rolespkg.sub.codec.Thing.go>`, :class:`ValueError`,\n'
        ':mod:`rolespkg._hidden`, :data:`UNDOCUMENTED`."""\n\nUNDOCUMENTED = 1\n\n'
        'class Thing:\n    """A thing."""\n\n    def go(self) -> None:\n'
        '        """Go; see :meth:`go` and :class:`Thing`."""\n'
    )
    pages = tmp_path / "reference"
    pages.mkdir()
    (pages / "sub.md").write_text("# Sub\n\n::: rolespkg.sub.codec\n\n::: rolespkg.sub\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(roles, "REFERENCE", pages)
    loaded = griffe.load("rolespkg", search_paths=[str(tmp_path)],
                         extensions=griffe.load_extensions(roles.SphinxRoles))
    codec = loaded["sub.codec"]
    assert codec.docstring.value == (
        "Codec: [`codec`][rolespkg.sub.codec], [`sub`][rolespkg.sub], "
        "[`Thing`][rolespkg.sub.codec.Thing],\n[`Thing.go`][rolespkg.sub.codec.Thing.go], "
        "[`the go`][rolespkg.sub.codec.Thing.go], `ValueError`,\n`rolespkg._hidden`, "
        "`UNDOCUMENTED`."
    )
    assert codec["Thing.go"].docstring.value == (
        "Go; see [`go`][rolespkg.sub.codec.Thing.go] and [`Thing`][rolespkg.sub.codec.Thing]."
    )


def _s1() -> dict[str, object]:
    (result,) = [r for r in docs_page.load() if r["_file"] == "s1_emulator.json"]
    return result


def _missing(results: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The first published result with a missed target, and that target's case."""
    result = next(r for r in results if any(not c["pass"] for c in r["checks"]))
    return result, next(c["case"] for c in result["checks"] if not c["pass"])


def test_the_charts_are_drawn_from_the_published_results():
    """A chart's figures are the result file's: change a run's figure, the chart changes."""
    result, _ = _missing(docs_page.load())
    drawn = docs_page.chart(result)
    assert drawn.startswith("<?xml") and "<svg" in drawn
    missed = next(c for c in result["checks"] if not c["pass"])
    assert f"{docs_page._fmt(missed['min'])} / {docs_page._fmt(missed['median'])}" in drawn
    assert docs_page.chart(copy.deepcopy(result)) == drawn, "a chart must not vary by build"
    changed = copy.deepcopy(result)
    changed["checks"][0]["min"] = 123_456.0
    redrawn = docs_page.chart(changed)
    assert redrawn != drawn
    assert "123,456" in redrawn and "123,456" not in drawn


@pytest.mark.timeout(300)
def test_the_benchmark_page_shows_a_chart_of_each_result(site: Path):
    page = (site / "benchmarks" / "index.html").read_text()
    for result in docs_page.load():
        if not result["checks"]:
            continue
        name = Path(docs_page.chart_path(result)).name
        assert f'src="../{docs_page.CHARTS}/{name}"' in page
        assert (site / docs_page.CHARTS / name).read_text() == docs_page.chart(result)


def test_every_miss_needs_its_comment():
    """A MISS without a comment, a comment on a target that passes, and a comment written
    for other results than those published each stop the page."""
    results, comments = docs_page.load(), docs_page.load_comments()
    docs_page.figures(results, comments)  # the published page: every MISS commented
    missing, case = _missing(results)
    with pytest.raises(ValueError, match=f"without its comment.*{re.escape(case[:40])}"):
        docs_page.figures(results, {})
    flipped = copy.deepcopy(results)
    memory = next(r for r in flipped if r["_file"] == "memory.json")
    memory["checks"][0]["pass"] = False
    with pytest.raises(ValueError, match=r"without its comment.*memory\.json"):
        docs_page.figures(flipped, comments)
    passing = copy.deepcopy(results)
    for check in next(r for r in passing if r["_file"] == missing["_file"])["checks"]:
        check["pass"] = True
    with pytest.raises(ValueError, match="does not miss"):
        docs_page.figures(passing, comments)
    republished = copy.deepcopy(results)
    next(r for r in republished if r["_file"] == missing["_file"])["date"] = "2027-01-01"
    with pytest.raises(ValueError, match="written for other results"):
        docs_page.figures(republished, comments)


@pytest.mark.timeout(300)
def test_each_miss_on_the_page_is_followed_by_its_comment(site: Path):
    page = (site / "benchmarks" / "index.html").read_text()
    comments = docs_page.load_comments()
    for result in docs_page.load():
        for index, check in enumerate(result["checks"]):
            if check["pass"]:
                continue
            anchor = f"{docs_page._anchor(result)}-miss-{index + 1}"
            assert f'href="#{anchor}">MISS</a>' in page
            said = re.search(f'<p id="{anchor}">(.*?)</p>', page, re.S)
            assert said is not None, f"no comment under {check['case']}"
            text = re.sub(r"<[^>]+>", "", said.group(1))
            assert docs_page._fmt(check[check["judged_on"]]) in text
            assert comments[result["_file"]]["misses"][check["case"]][:60] in text


def test_the_judged_figure_is_marked_and_the_best_run_named():
    result = _s1()
    at_least = result["checks"][0]
    assert docs_page._spread(at_least).startswith(f"**{docs_page._fmt(at_least['min'])}** / ")
    markdown = docs_page._section(
        result, docs_page.load_comments().get("s1_emulator.json", {}).get("misses", {}))
    best = docs_page._fmt(result["summary"]["s1_asyncio_msgs_per_s"])
    name = docs_page._name("s1_asyncio_msgs_per_s")
    assert f"| {name} | {best} | the best of 5 runs |" in markdown


def test_the_targets_the_page_describes_are_judged():
    """The scaling benchmark's "within 2x" and the rules' "under 10 µs", which their
    result files do not judge, are judged from the rows: a growth past 2x is a MISS."""
    results = {r["_file"]: r for r in docs_page.load()}
    scaling = [c for c in results["scaling.json"]["checks"] if c["id"] == "scaling"]
    assert {c["case"].split(":")[0] for c in scaling} == {
        "send", "peek 10", "receive+complete", "runtime properties",
        "send+delivery, receivers waiting"}
    assert all(c["pass"] and c["target"] == "<= 2" for c in scaling)
    rules = [c for c in results["rules.json"]["checks"] if c["id"] == "rules"]
    assert len(rules) == 4 and all(c["target"] == "<= 10" for c in rules)
    grown = copy.deepcopy(results["scaling.json"])
    grown["rows"][0]["growth"] = 2.5
    (send, *_) = docs_page.derived_checks(grown)
    assert not send["pass"] and send["max"] == 2.5


def test_a_rows_min_median_and_max_show_as_one_spread():
    """The measurements show min / median / max together, as the targets do; a column
    without its two others stays as it is."""
    rows = [{"case": "x", "min_per_s": 1.0, "median_per_s": 2.0, "max_per_s": 3.0,
             "us_min": 5.0, "min": 7.0, "median": 8.0, "max": 9.0}]
    assert docs_page._spreads(rows) == [{
        "case": "x", "per_s (min / median / max)": "1 / 2 / 3", "us_min": 5.0,
        "min / median / max": "7 / 8 / 9"}]
