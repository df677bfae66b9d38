"""The journal's tables, and moving an older aiosb's database to them.

The tables (:data:`SCHEMA`), and the columns added to them since their first release
(:data:`ADDED_COLUMNS`), which the journal makes when it opens the database.

:func:`migrate` moves an older database to the compact table (#39): the rows of table
``messages`` (one JSON document, or a pickle, a row; keyed by namespace and entity
names) become rows of ``msgs``, their entities numbered by the one cache of entity ids
(:class:`._database.EntityIds`). The journal does it on its own thread, in the
background of a restart (:mod:`._recovery` waits for it before it loads the messages):
a deep database no longer delays listening.

Imports: :mod:`.._record`, :mod:`._rows`, :mod:`._database`.
"""

from __future__ import annotations

import logging
import sqlite3

from ...wire.json_values import loads
from .._record import FIELDS, _Record
from ._database import EntityIds
from ._rows import decode_record, message_row

__all__ = ["ADDED_COLUMNS", "SCHEMA", "migrate"]

log = logging.getLogger("aiosb.emulator")

#: The journal's tables.
SCHEMA = """
CREATE TABLE IF NOT EXISTS namespaces (name TEXT PRIMARY KEY, tier TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entities (
    ns TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL,
    nfrag INTEGER NOT NULL, created REAL NOT NULL, props BLOB NOT NULL,
    PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS entity_ids (
    id INTEGER PRIMARY KEY, ns TEXT NOT NULL, key TEXT NOT NULL, UNIQUE (ns, key));
CREATE TABLE IF NOT EXISTS msgs (
    eid INTEGER NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, head BLOB NOT NULL,
    lock BLOB, PRIMARY KEY (eid, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sequences (
    ns TEXT NOT NULL, entity TEXT NOT NULL, fragment INTEGER NOT NULL, high INTEGER NOT NULL,
    PRIMARY KEY (ns, entity, fragment));
CREATE TABLE IF NOT EXISTS rules (
    ns TEXT NOT NULL, entity TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (ns, entity));
CREATE TABLE IF NOT EXISTS sessions (
    ns TEXT NOT NULL, entity TEXT NOT NULL, sid TEXT NOT NULL, state BLOB,
    state_set REAL NOT NULL DEFAULT 0, PRIMARY KEY (ns, entity, sid));
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value NOT NULL);
"""
#: Columns added to a table since its first release: a database written before one was
#: added gets it, with its default, when it is opened.
ADDED_COLUMNS = [("sessions", "state_set", "REAL NOT NULL DEFAULT 0")]

#: Rows moved at a time.
CHUNK = 2_000


def migrate(db: sqlite3.Connection) -> None:
    """Move the rows of an older database's ``messages`` table (one JSON document, or
    a pickle, a row; keyed by namespace and entity names) into ``msgs``, in one
    transaction, then give the space back (VACUUM). Every MessageId stays the text it
    was: an older aiosb gave each process a random prefix, so an id spelled as the
    broker spells its own cannot be told from a client's (a GUID, the official SDKs'
    default: #39, adopting its prefix and number made every start count to 10^14)."""
    eid = EntityIds(db)  # no writer writes yet: a group waits for the move
    have = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    lock = "lock" if "lock" in have else "NULL"
    moved = 0
    db.execute("BEGIN")
    try:
        rows = db.execute(f"SELECT ns, entity, seq, store, data, {lock} FROM messages")
        while batch := rows.fetchmany(CHUNK):
            out = []
            for ns, key, seq, where, data, held in batch:
                rec = _Record.blank()
                fields = decode_record(data)
                for name in FIELDS:  # a field added since the row was written reads as None
                    setattr(rec, name, fields.get(name))
                if rec.delivery_count is None:
                    rec.delivery_count = 0
                if held is not None:
                    rec.state, rec.delivery_count, rec.lock_token, rec.locked_until = loads(held)
                out.append((eid(ns, key), seq, rec.body,
                            message_row(rec, True, None if where == "m" else where)))
            db.executemany(
                "INSERT OR REPLACE INTO msgs (eid, seq, body, head) VALUES (?, ?, ?, ?)", out)
            moved += len(out)
        db.execute("DROP TABLE messages")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("VACUUM")
    log.info("moved %d message rows to the compact table", moved)
