"""Moving an older aiosb's database to the compact table (#39): the rows of table
``messages`` (one JSON document, or a pickle, a row; keyed by namespace and entity
names) become rows of ``msgs``. The journal does it on its own thread, in the
background of a restart (:mod:`._recovery` waits for it before it loads the messages):
a deep database no longer delays listening.

Imports: :mod:`._record`, :mod:`._rows`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

from ..wire.json_values import loads
from ._record import FIELDS, _Record
from ._rows import decode_record, message_row

__all__ = ["migrate"]

log = logging.getLogger("aiosb.emulator")

#: Rows moved at a time.
CHUNK = 2_000


def migrate(db: sqlite3.Connection, eid: Callable[[str, str], int]) -> None:
    """Move the rows of an older database's ``messages`` table (one JSON document, or
    a pickle, a row; keyed by namespace and entity names) into ``msgs``, in one
    transaction, then give the space back (VACUUM). Every MessageId stays the text it
    was: an older aiosb gave each process a random prefix, so an id spelled as the
    broker spells its own cannot be told from a client's (a GUID, the official SDKs'
    default: #39, adopting its prefix and number made every start count to 10^14)."""
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
