"""Issue #51: the documentation site's tables fit the page. No table on any page is
wider than the content column at a desktop width, so that none has to be scrolled
sideways to read its last columns: the reference lists parameters (mkdocs.yml), the
benchmark page's names break after each ``_`` and a result's wide measurements are
turned on their side (benchmarks/docs_page.py), cells are narrower and code in them may
break (docs/assets/site.css)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

WIDER_THAN_ITS_BOX = """() => [...document.querySelectorAll('.md-content__inner table')]
    .filter(table => {
        const box = table.closest('.md-typeset__scrollwrap') || table.parentElement;
        return table.getBoundingClientRect().width > box.clientWidth + 1
            || table.scrollWidth > table.clientWidth + 1;
    })
    .map(table => table.rows[0].innerText.slice(0, 80))"""


@pytest.mark.timeout(300)
def test_no_table_is_wider_than_the_content_column(browser: Any, site: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    wide = {}
    for html in sorted(site.glob("**/index.html")):
        page.goto(html.as_uri())
        if found := page.evaluate(WIDER_THAN_ITS_BOX):
            wide[str(html.parent.relative_to(site))] = found
    page.close()
    assert wide == {}
