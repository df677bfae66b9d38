"""The emulator's import rules (issue #13, layout.md), checked by reading the imports:
the parts never import the broker, the journal sits below it, no module imports one
that imports it back, and the broker knows no transport, client or server.

Every import counts, at module level, in a function, or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aiosb.emulator

PACKAGE = Path(aiosb.emulator.__file__).parent


def _imports(path: Path) -> set[str]:
    """The aiosb modules ``path`` imports (dotted names, packages resolved)."""
    name = "aiosb.emulator" + ("" if path.stem == "__init__" else f".{path.stem}")
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("aiosb")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if not module.startswith("aiosb"):
                continue
            for alias in node.names:  # ``from . import _sending`` names a module
                if _is_module(f"{module}.{alias.name}"):
                    found.add(f"{module}.{alias.name}")
                else:
                    found.add(module)
    return found


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


GRAPH = {
    ("aiosb.emulator" + ("" if p.stem == "__init__" else f".{p.stem}")): _imports(p)
    for p in PACKAGE.glob("*.py")
}


def _reach(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in GRAPH.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_graph_is_read() -> None:
    assert "aiosb.emulator._store" in GRAPH["aiosb.emulator._entity"]
    assert "aiosb.emulator._sending" in GRAPH["aiosb.emulator._broker"]


def test_no_emulator_module_imports_one_that_imports_it_back() -> None:
    assert [m for m in GRAPH if m in _reach(m)] == []


@pytest.mark.parametrize(
    "part",
    [
        "_record",
        "_partitions",
        "_store",
        "_entity",
        "_namespace",
        "_sending",
        "_delivery",
        "_sessions",
        "_manage",
        "_durable",
        "_faults",
    ],
)
def test_the_parts_and_the_journal_never_reach_the_broker(part: str) -> None:
    reached = _reach(f"aiosb.emulator.{part}")
    assert "aiosb.emulator._broker" not in reached
    assert "aiosb.emulator" not in reached  # the package imports the broker


def test_the_store_and_the_record_know_nothing_above_them() -> None:
    emulator = {m for m in _reach("aiosb.emulator._store") if m.startswith("aiosb.emulator")}
    assert emulator == {
        "aiosb.emulator._record", "aiosb.emulator._held", "aiosb.emulator._surroundings"
    }
    around = {m for m in _reach("aiosb.emulator._surroundings") if m.startswith("aiosb.emulator")}
    assert around == {"aiosb.emulator._record"}
    held = {m for m in _reach("aiosb.emulator._held") if m.startswith("aiosb.emulator")}
    assert held == {"aiosb.emulator._record"}
    assert not any(m.startswith("aiosb.emulator") for m in _reach("aiosb.emulator._record"))


def test_the_broker_knows_no_transport_client_or_server() -> None:
    reached = _reach("aiosb.emulator._broker")
    assert not any(m.startswith("aiosb.transport") for m in reached)
    assert not {"aiosb.client", "aiosb.server.http", "aiosb.pairing"} & reached
