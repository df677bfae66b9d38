"""Issue 13: the house keeps its rooms. The layers and contracts of ARCHITECTURE.md
(configured for import-linter in pyproject.toml) hold, no module imports one that
imports it back, the one upward import stays where it is allowed, and no module grows
past the size a reader can hold."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import aiosb
from aiosb.client import Namespace

ROOT = Path(aiosb.__file__).parent
#: The one import against the layers: Namespace.pair() imports pairing when called.
UPWARD = ("aiosb.client", "aiosb.pairing")
#: Modules allowed over MAX_LINES, and why.
LONG: dict[str, str] = {
    "aiosb/emulator/durable/_recovery.py": (
        "a restart's load is one concept: the namespaces rebuilt before listening, the "
        "messages loaded in the background, what an operation waits for, and the garbage "
        "collector held off and frozen around that load (it was cut out to stay under 600)"
    ),
}
MAX_LINES = 600


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("aiosb", exclude_type_checking_imports=True, cache_dir=None)


def test_the_import_contracts_hold():
    """The layers (vocabulary at the bottom, the CLI and Spark at the top), pairing
    free of any backend, and no cycles among siblings: lint-imports says KEPT."""
    tool = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(tool), "--no-cache"], capture_output=True, text=True, timeout=120,
        cwd=ROOT.parent,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def cycles(graph: grimp.ImportGraph, ignore: set[tuple[str, str]]) -> list[list[str]]:
    """The import cycles among every module of the graph (packages' ``__init__``
    included), as strongly connected components (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.find_modules_directly_imported_by(module)):
            if (module, other) in ignore:
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            part = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                part.append(other)
                if other == module:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_one_that_imports_it_back(graph):
    assert cycles(graph, {UPWARD}) == []


def test_the_cycle_finder_finds_a_cycle():
    made = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        made.add_import(importer=a, imported=b)
    assert cycles(made, set()) == [["p.a", "p.b", "p.c"]]
    assert cycles(made, {("p.c", "p.a")}) == []


def test_the_upward_import_is_only_inside_namespace_pair(graph):
    lines, start = inspect.getsourcelines(Namespace.pair)
    inside = range(start, start + len(lines))
    details = graph.get_import_details(importer=UPWARD[0], imported=UPWARD[1])
    assert details, "client no longer imports pairing: drop UPWARD from the contracts"
    assert [d["line_number"] for d in details if d["line_number"] not in inside] == []


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT.parent).as_posix()
        count = len(path.read_text().splitlines())
        if count > MAX_LINES and name not in LONG:
            long[name] = count
    assert long == {}
    stale = [name for name in LONG if len((ROOT.parent / name).read_text().splitlines())
             <= MAX_LINES]
    assert stale == [], "these are short now: drop them from LONG"
