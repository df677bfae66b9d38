"""Issue #51: the built site as a reader sees it. The API reference shows the docstrings'
Sphinx roles as links (or as code where no page renders the target), never as raw
``:class:`...``` text, and no private import alias (``_dt.timedelta``) in a signature; the
benchmark page's charts are drawn from the published results and every missed target
is commented."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import griffe
import pytest

ROOT = Path(__file__).parent.parent
RAW_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj|const):(?:<code>|`)")
PRIVATE_ALIAS = re.compile(r'<span class="n">_[a-z]\w*</span><span class="o">\.</span>')


def _extension() -> ModuleType:
    path = ROOT / "docs" / "hooks" / "sphinx_roles.py"
    spec = importlib.util.spec_from_file_location("sphinx_roles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_site(out: Path) -> Path:
    """The site, built strictly into ``out`` (a cross-reference that leads nowhere fails
    it)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_site(tmp_path_factory.mktemp("site"))


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
def test_no_signature_shows_a_private_import_alias(site: Path):
    shown = {page.parent.name: PRIVATE_ALIAS.findall(page.read_text())
             for page in _reference_pages(site)}
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
