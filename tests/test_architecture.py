"""Issue 13: the house keeps its rooms. The layers and contracts of ARCHITECTURE.md
(configured for import-linter in pyproject.toml) hold, no module imports one that
imports it back, the one upward import stays where it is allowed, and no module grows
past the size a reader can hold unless it is listed with its reason. Issue 49: no two
modules share a file name, ARCHITECTURE.md names every module and package of aiosb by
its path and nothing that is not there, and the AMQP packages' modules take no private
name of another module."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import grimp
import pytest

import aiosb
from aiosb.client import Namespace

ROOT = Path(aiosb.__file__).parent
#: The one import against the layers: Namespace.pair() imports pairing when called.
UPWARD = ("aiosb.client", "aiosb.pairing")
#: Modules allowed over MAX_LINES, and why: a module is one concept, and a long one is
#: kept whole rather than cut by length (#49).
LONG: dict[str, str] = {
    "aiosb/emulator/durable/_recovery.py": (
        "a restart's load is one concept: the namespaces rebuilt before listening, the "
        "messages loaded in the background, what an operation waits for, and the garbage "
        "collector held off and frozen around that load (it was cut out to stay under 600)"
    ),
}
MAX_LINES = 600
#: The packages none of whose modules takes a private name of another module (#49: a name
#: two modules share is public where it lives, or lives where both read it).
OWN_NAMES = ("aiosb.server.amqp", "aiosb.transport.amqp")
#: The private names still taken across modules there, and why.
PRIVATE_TAKEN = {
    ("aiosb.server.amqp._websocket", "aiosb.server.amqp.front_end._unsigned"):
        "front_end is being reworked with the listener's first-byte routing (#49)",
}
#: The map of the house: it names every module and package of aiosb, by path.
MAP = ROOT.parent / "ARCHITECTURE.md"
#: A path the map gives: a module (``server/amqp/codec.py``, ``aiosb/cli.py``, or a file
#: of the repository such as ``tests/test_architecture.py``) or a folder (``server/amqp/``).
_PATH = re.compile(
    r"(?<![\w./$-])((?:[A-Za-z_]\w*/)*[A-Za-z_]\w*\.py|(?:[A-Za-z_]\w*/)+)(?![\w.])"
)


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
    assert long == {}, "split by concept, or list the module in LONG with its reason"
    stale = [name for name in LONG if not (ROOT.parent / name).is_file()
             or len((ROOT.parent / name).read_text().splitlines()) <= MAX_LINES]
    assert stale == [], "these are short now, or gone: drop them from LONG"


def test_no_two_modules_share_a_file_name():
    """#49: a file name says what its module holds, so one name is one module (two
    ``_link.py`` were the journal writer's pipe and the Spark reads' locked chunks)."""
    places: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            places[path.name].append(path.relative_to(ROOT.parent).as_posix())
    assert {name: where for name, where in places.items() if len(where) > 1} == {}


def read_map(text: str, root: Path) -> tuple[set[str], list[str]]:
    """What a map names of the package at ``root``, and the names it gives that lead
    nowhere. A module or package is named by its path (``aiosb/server/amqp/codec.py``),
    its path inside the package (``server/amqp/codec.py``, ``server/amqp/``) or its
    dotted name (``aiosb.server.amqp.codec``, also with a name of it after:
    ``aiosb.server.amqp.codec.decode``), as a whole word; a package also by its
    ``__init__.py``. Named places come back as paths from the package's parent
    (``aiosb/server/amqp/codec.py``, ``aiosb/server/``).
    """
    top = root.parent
    named: set[str] = set()
    nowhere: list[str] = []

    def found(place: Path) -> None:  # a package's __init__.py names its package
        place = place.parent if place.name == "__init__.py" else place
        named.add(place.relative_to(top).as_posix() + ("/" if place.is_dir() else ""))

    for path in _PATH.findall(text):
        place = next((p for p in (top / path, root / path) if p.exists()), None)
        if place is None:
            nowhere.append(path)
        else:
            found(place)
    for dotted in re.findall(rf"(?<![\w.]){re.escape(root.name)}(?:\.\w+)+", text):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            base = top.joinpath(*parts[:cut])
            module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            if module.is_file():
                rest = parts[cut:]  # a name of the module: it must be in its text
                if rest and not re.search(rf"\b{rest[0]}\b", module.read_text()):
                    nowhere.append(dotted)
                else:
                    found(module)
                break
    return named, nowhere


def unnamed(root: Path, named: set[str]) -> list[str]:
    """The modules (``__init__.py`` aside: its package stands for it) and packages of
    ``root`` that are not in ``named``."""
    places = [path.parent if path.name == "__init__.py" else path
              for path in sorted(root.rglob("*.py"))]
    every = [p.relative_to(root.parent).as_posix() + ("/" if p.is_dir() else "")
             for p in places]
    return [place for place in every if place not in named]


def test_the_map_names_every_module_and_nothing_that_is_not_there():
    """#49: ARCHITECTURE.md (and so the docs' architecture page, which includes it) names
    every module and package of aiosb by its path, and a path it gives leads somewhere:
    a module added, moved or removed is a line of the map to add, move or remove."""
    named, nowhere = read_map(MAP.read_text(), ROOT)
    assert unnamed(ROOT, named) == [], "give each its line in ARCHITECTURE.md"
    assert nowhere == [], "ARCHITECTURE.md names these, which are not in the tree"


def test_the_map_reader_finds_a_module_left_out_and_a_name_gone_stale(tmp_path: Path):
    """#49: the reader behind the test above tells a named module from one left out, and
    a path or dotted name that leads somewhere from one that does not."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "ab.py", "sub/__init__.py", "sub/b.py", "sub/c.py"):
        (root / name).write_text("def here(): pass\n")
    text = """
    pkg/__init__.py  sub/b.py   sub/    pkg.ab.here   gone.py   sub/gone/   pkg.sub.c.nothing
    """
    named, nowhere = read_map(text, root)
    assert unnamed(root, named) == ["pkg/a.py", "pkg/sub/c.py"]
    assert nowhere == ["gone.py", "sub/gone/", "pkg.sub.c.nothing"]


def is_module(dotted: str) -> bool:
    place = ROOT.parent.joinpath(*dotted.split("."))
    return place.with_suffix(".py").is_file() or (place / "__init__.py").is_file()


def private_names_taken(package: str) -> set[tuple[str, str]]:
    """``(module, name)`` for each private name (``_x``, not ``__x__``) that a module of
    ``package`` imports from another aiosb module (a private module itself aside: a
    package's modules may be private to it)."""
    taken: set[tuple[str, str]] = set()
    for path in sorted(ROOT.parent.joinpath(*package.split(".")).rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = parts[:-1]  # the package a relative import starts from
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
            source = ".".join(filter(None, [base, node.module or ""]))
            for alias in node.names:
                name = alias.name
                whole = f"{source}.{name}"
                if (source.startswith("aiosb") and name.startswith("_")
                        and not name.startswith("__") and not is_module(whole)):
                    taken.add((module, whole))
    return taken


@pytest.mark.parametrize("package", OWN_NAMES)
def test_no_module_takes_another_modules_private_names(package: str):
    """#49: ``_batch_columns`` took ``messages``' private ``_name`` and ``_property``, a
    split by length; what two modules share is public in its module."""
    taken = private_names_taken(package)
    listed = {pair for pair in PRIVATE_TAKEN if pair[0].startswith(package + ".")}
    assert taken - listed == set(), "make the name public where it lives, or move it"
    assert listed - taken == set(), "these are no longer taken: drop them from PRIVATE_TAKEN"
