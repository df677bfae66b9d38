"""Issue 18, item 13: the durable store writes an explicit, versioned format; rows aiosb
0.1 wrote (pickles) are still read, through an unpickler that runs no code."""

from __future__ import annotations

import pickle
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta

import pytest

import aiosb
from aiosb import emulator, errors
from aiosb.emulator._record import FIELDS, _Record
from aiosb.emulator.durable._rows import FORMAT, decode_record, encode_record
from aiosb.entities import QueueProperties
from aiosb.server.http import serve

pytestmark = pytest.mark.looptime

#: The message table of every aiosb before #39's compact one (``msgs``).
OLD_MESSAGES = (
    "CREATE TABLE messages (ns TEXT NOT NULL, entity TEXT NOT NULL, seq INTEGER NOT NULL, "
    "store TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (ns, entity, seq))")

EVERY_KIND = {
    "s": "text ü", "i": 2**70, "f": 1.5, "nan": float("inf"), "b": b"\x00\xff", "t": True,
    "n": None, "d": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    "dt": timedelta(days=-3, microseconds=7), "u": uuid.UUID(int=5),
}


def test_a_record_round_trips_every_kind_of_value():
    fields = {name: None for name in FIELDS}
    fields.update(body=b"\x00body", ttl=7200.0, ttl_td=timedelta(hours=2),
                  scheduled=datetime(2030, 1, 1, tzinfo=UTC), props=EVERY_KIND, seq=7,
                  message_id="m \u00fc", delivery_count=0, deferred=False, enqueued=1.25)
    rec = _Record.blank()
    for name, value in fields.items():
        setattr(rec, name, value)
    data = encode_record(rec)
    assert data.startswith(FORMAT) and b"\x80" not in data[:2]
    back = decode_record(data)  # what is None is left out, and read back as None
    assert {name: back.get(name) for name in FIELDS} == fields
    assert len(back) == sum(value is not None for value in fields.values())


async def _make_legacy_store(path, crafted: bytes | None = None) -> None:
    """A data directory as aiosb 0.1 wrote it: entity properties and messages pickled."""
    async with serve(data_dir=path) as server, aiosb.connect(server.namespace_url("old")) as ns:
        await ns.create_queue("q")
    emulator.reset()
    db = sqlite3.connect(path / "aiosb.sqlite3")
    props = QueueProperties(name="q", lock_duration=timedelta(seconds=45))
    db.execute("UPDATE entities SET props = ? WHERE key = 'q'",
               (pickle.dumps(props, pickle.HIGHEST_PROTOCOL),))
    fields = {name: None for name in FIELDS}
    fields.update(body=b"from 0.1", message_id="m1", props=EVERY_KIND, size=8, seq=1,
                  enqueued=1_700_000_000.0, delivery_count=0, state=0, deferred=False,
                  ttl=float("inf"), frag=0, key=None)
    data = crafted or pickle.dumps(fields, pickle.HIGHEST_PROTOCOL)
    db.execute(OLD_MESSAGES)  # the table of message rows as it was until #39
    db.execute("INSERT INTO messages (ns, entity, seq, store, data) "
               "VALUES ('old', 'q', 1, 'm', ?)", (data,))
    db.execute("INSERT OR REPLACE INTO sequences VALUES ('old', 'q', 0, 1)")
    db.commit()
    db.close()


async def test_a_store_written_by_aiosb_0_1_is_read(tmp_path):
    await _make_legacy_store(tmp_path)
    async with serve(data_dir=tmp_path) as server, aiosb.connect(server.namespace_url("old")) as ns:
        assert (await ns.get_queue("q")).lock_duration == timedelta(seconds=45)
        async with ns.receiver("q") as receiver:
            [msg] = await receiver.receive(max_wait=0)
        assert (msg.body, msg.message_id) == (b"from 0.1", "m1")
        assert msg.application_properties == EVERY_KIND


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("echo owned > /dev/null",))


async def test_a_crafted_pickle_is_refused_not_run(tmp_path):
    await _make_legacy_store(tmp_path, crafted=pickle.dumps(_Exploit()))
    # The rows move in the background (#39): the server listens, the entity is refused.
    async with serve(data_dir=tmp_path) as server, aiosb.connect(server.namespace_url("old")) as ns:
        with pytest.raises(errors.InvalidArgument, match=r"names (posix|os)\.system"):
            await ns.runtime_properties("q")


async def test_a_row_of_an_unknown_format_is_refused_with_a_sentence(tmp_path):
    await _make_legacy_store(tmp_path, crafted=b"aiosb-json-9\n{}")
    async with serve(data_dir=tmp_path) as server, aiosb.connect(server.namespace_url("old")) as ns:
        with pytest.raises(errors.InvalidArgument, match="format b'aiosb-json-9'"):
            await ns.runtime_properties("q")
