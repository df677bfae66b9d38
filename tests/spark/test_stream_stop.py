"""A streaming source stopped while its receive is on its way (found by S-8 reads, #39).

Spark stops a query by ending the driver-side reader's process with SIGTERM; the reader
may then be inside ``latestOffset``, its receive waiting for messages. The stop must let
that receive finish, not close the receiver under it (its answer would be lost, the
messages locked for nobody until their locks end), and abandon what it brings, so that
comes back at once.
"""

from __future__ import annotations

import threading
import time

import pytest

from aiosb import Message
from aiosb.bridge import Bridge
from aiosb.spark._options import stream_read_options
from aiosb.spark._stream import StreamSource

pytestmark = [pytest.mark.spark, pytest.mark.timeout(60)]


def test_a_stop_abandons_what_a_receive_on_its_way_brings():
    bridge = Bridge.shared()  # the source's own: a memory namespace serves one loop
    url = "memory://stopping"
    with bridge.connect(url) as ns:
        ns.create_queue("q")
    source = StreamSource(stream_read_options(
        {"namespace": url, "entity": "q", "max_wait_seconds": "3"}))
    offsets: list[int] = []
    errors: list[BaseException] = []

    def admit() -> None:
        try:
            offsets.append(source.latest(0, 10))
        except Exception as exc:  # shown by the assertion below
            errors.append(exc)

    latest = threading.Thread(target=admit)
    latest.start()  # its receive waits up to 3 s for a first message
    time.sleep(0.5)
    stopping = threading.Thread(target=source.stop)
    stopping.start()  # as the SIGTERM handler does, while the receive is on its way
    time.sleep(0.5)
    bridge.sender(url, "q").send([Message(str(i)) for i in range(5)])
    latest.join(10)
    stopping.join(10)
    assert errors == [] and offsets == [0]  # nothing admitted: the query is stopping
    with bridge.connect(url) as ns, ns.receiver("q") as receiver:
        back = receiver.receive(max_messages=10, max_wait=1)  # back at once, not in 60 s
        assert sorted(m.body.decode() for m in back) == [str(i) for i in range(5)]
        assert all(m.delivery_count == 2 for m in back)
        receiver.complete(back)
