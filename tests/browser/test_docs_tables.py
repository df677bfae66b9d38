"""Issue #51: the documentation site's tables fit the page. A table wider than the
content column (the benchmark figures, a reference's parameters) scrolls inside the
column or wraps its long code, and does not run past it (docs/assets/site.css)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_docs_site import build_site


@pytest.mark.timeout(300)
def test_no_table_runs_past_the_content_column(browser: Any, tmp_path: Path):
    site = build_site(tmp_path / "site")
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    wide = {}
    for html in sorted(site.glob("**/index.html")):
        page.goto(html.as_uri())
        past = page.evaluate("""() => {
            const column = document.querySelector('.md-content__inner').getBoundingClientRect();
            return [...document.querySelectorAll('.md-content__inner table')]
                .filter(table => table.getBoundingClientRect().right > column.right + 1)
                .length;
        }""")
        if past:
            wide[str(html.parent.relative_to(site))] = past
    page.close()
    assert wide == {}
