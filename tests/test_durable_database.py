"""Durable mode opens its SQLite database one way, and keeps its policy out of the pipe
(#49).

Every connection to the journal's database (the journal's own, the writer process's,
the loader's at a restart) is opened by ``aiosb.emulator.durable._database.connect``:
each waits for a lock another holds (``busy_timeout``) rather than failing, and runs
with the pragmas its use needs. Entity ids are made by one cache. The writer's pipe
(``_writer_client``) carries frames and answers, and knows nothing of what they hold.
"""

from __future__ import annotations

import ast
import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import aiosb
from aiosb import Message, emulator
from aiosb.emulator.durable import Journal, _recovery
from aiosb.emulator.durable._database import BUSY_TIMEOUT_MS, EntityIds
from aiosb.server.http import serve

AIOSB = Path(aiosb.__file__).parent
DURABLE = AIOSB / "emulator" / "durable"
#: ``PRAGMA synchronous`` as SQLite reads it back.
NORMAL, FULL = 1, 2


def _pragmas(db: sqlite3.Connection) -> dict[str, Any]:
    return {name: db.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("busy_timeout", "journal_mode", "synchronous", "query_only")}


@pytest.mark.parametrize(("fsync", "level"), [(False, NORMAL), (True, FULL)])
async def test_every_connection_to_the_database_waits_for_a_lock(
        tmp_path, monkeypatch, fsync, level):
    """#49: the journal's own connection, the loader's (a restart's) and the writer
    process's (the real one, started by the journal, run by path) all have
    ``busy_timeout`` (:data:`BUSY_TIMEOUT_MS`); the two that write run in WAL with
    ``synchronous`` as ``fsync`` asks; the loader only reads. (Before, only the writer
    set it: the others waited Python's default, 5 s.)"""
    emulator.reset()
    async with serve(data_dir=tmp_path, fsync=fsync) as server:
        async with aiosb.connect(server.namespace_url("ns")) as ns:
            await ns.create_queue("q")
            async with ns.sender("q") as sender:
                await sender.send(Message(b"kept"))
    emulator.reset()

    async def held(self: Any) -> None:  # the loader's connection stays open
        await asyncio.Event().wait()

    monkeypatch.setattr(_recovery.Recovery, "_run", held)
    journal = Journal(tmp_path, fsync=fsync)
    await journal.open()
    try:
        await journal.load()
        own = await journal.read(_pragmas)
        assert journal.recovery is not None
        loader = await journal.recovery._read(_pragmas)
        # the writer process records its own connection's pragmas, in a frame of its own
        journal._ops.append((
            "INSERT OR REPLACE INTO meta SELECT 'seen_' || ?, * FROM pragma_busy_timeout "
            "UNION ALL SELECT 'seen_synchronous', * FROM pragma_synchronous", ("busy",)))
        journal._changed()
        await journal.commit()
        seen = dict(await journal.read(lambda db: db.execute(
            "SELECT name, value FROM meta WHERE name LIKE 'seen_%'").fetchall()))
    finally:
        await journal.aclose()
        emulator.reset()
    assert own == {"busy_timeout": BUSY_TIMEOUT_MS, "journal_mode": "wal",
                   "synchronous": level, "query_only": 0}
    assert loader["busy_timeout"] == BUSY_TIMEOUT_MS and loader["query_only"] == 1
    assert seen == {"seen_busy": BUSY_TIMEOUT_MS, "seen_synchronous": level}


def test_sqlite_is_opened_and_entity_ids_made_in_one_place():
    """#49: one opener (``_database.connect``) and one cache of entity ids
    (``_database.EntityIds``): no other module of aiosb opens SQLite or writes
    ``entity_ids`` (the journal, the writer, the loader and the migration each did it
    their own way)."""
    opens, makes = [], []
    for path in sorted(AIOSB.rglob("*.py")):
        if path == DURABLE / "_database.py":
            continue
        text = path.read_text()
        if "sqlite3.connect(" in text:
            opens.append(str(path.relative_to(AIOSB)))
        if "INTO entity_ids" in text:
            makes.append(str(path.relative_to(AIOSB)))
    assert opens == [] and makes == []


def test_the_entity_id_cache_forgets_what_a_rolled_back_transaction_made(tmp_path):
    """#49: the one cache of entity ids forgets the ids made since a mark when their
    transaction rolls back (the writer's), and keeps those made before."""
    db = sqlite3.connect(tmp_path / "ids.sqlite3", isolation_level=None)
    db.execute("CREATE TABLE entity_ids (id INTEGER PRIMARY KEY, ns TEXT NOT NULL, "
               "key TEXT NOT NULL, UNIQUE (ns, key))")
    ids = EntityIds(db)
    q = ids("ns", "q")
    mark = ids.mark()
    db.execute("BEGIN")
    ids("ns", "r")
    db.execute("ROLLBACK")
    ids.forget_since(mark)
    db.execute("INSERT INTO entity_ids (ns, key) VALUES ('ns', 'other')")  # takes r's id
    r = ids("ns", "r")
    rows = dict(db.execute("SELECT key, id FROM entity_ids"))
    db.close()
    assert rows == {"q": q, "other": rows["other"], "r": r} and r != rows["other"]


def test_the_writer_client_is_only_the_pipe():
    """#49: the writer's pipe imports nothing of aiosb but the writer process (the
    frames' head and answers): what a frame holds (:mod:`._group_commit`), the young
    locks, the journal's error, live elsewhere."""
    tree = ast.parse((DURABLE / "_writer_client.py").read_text())
    relative = sorted(
        "." * node.level + (node.module or "") + ":" + ",".join(a.name for a in node.names)
        for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level)
    absolute = [node for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)
                and any((getattr(node, "module", None) or a.name).startswith("aiosb")
                        for a in node.names)]
    assert relative == [".:_writer_process"] and absolute == []
