"""Issues 36 and 48: the AMQP front end fuzzed, the short run (the campaign is
``./dev fuzz``).

In process, through :class:`~.harness.Target` (``serve_amqp``'s port: its listener and
connection handler, findings as the harness's module says):

- structure-aware: SDK-like scripts mutated by hypothesis (:mod:`.strategies`), with
  tokens the server checks;
- the recorded sessions of the official SDK (``corpus/``), replayed whole and with bytes
  changed, with any signature taken so that they replay past their tokens' expiry.

Through the front door (#48), :class:`~.front_door.Served`: ``aiosb serve`` in a process
of its own, fuzzed through every way in (:mod:`.doors`: the first-byte router, TLS on
both ports, the HTTP hand-off, AMQP over WebSockets, raw AMQP), then checked, the same
server, for the official client served and descriptors and memory given back.

Each run ends with a good client on the server it fuzzed, not on a fresh one.

Derandomized, so that the run is the same every time and a regression shows as one; the
campaign explores beyond it. Every finding's input goes into ``corpus/`` as
``finding-*.bin`` and is replayed here for good.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from .client import Plan
from .doors import CONTENTS, FOUND, WARM_UP, WAYS_IN, plans
from .front_door import Served
from .harness import Finding, Target, corpus_files
from .strategies import client_inputs, mutated_corpus

pytestmark = pytest.mark.timeout(300)

#: Where the front door's inputs must have gone, and been answered (in the clear on the
#: AMQPS port, the answer is no protocol: that way is fuzzed, with nothing to reach).
WAYS = {f"{what} {how} on the {port} port" for what in ("AMQP", "HTTP", "WebSocket (101)")
        for how, port in (("in the clear", "amqp"), ("in TLS", "amqp"), ("in TLS", "amqps"))}
#: Inputs of the short run through the front door, for each way in, by what goes through
#: (each is a connection to a process: 208 in all).
FRONT_DOOR_EXAMPLES = {"amqp": 16, "websocket": 20, "http": 8, "bytes": 6, "nothing": 2}
SHORT = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))


@pytest.fixture
def checked() -> Iterator[Target]:
    target = Target()
    yield target
    target.close()


@pytest.fixture
def replaying() -> Iterator[Target]:
    target = Target(any_signature=True)
    yield target
    target.close()


def test_the_recorded_sdk_sessions_replay_and_are_answered(replaying):
    """The corpus is what the SDK sends: each session replayed whole gets its OPEN
    answered and every link attached."""
    files = [f for f in corpus_files() if f.name.startswith("sdk-")]
    assert len(files) >= 6
    for path in files:
        answer = replaying.run(path.read_bytes())
        assert answer.startswith(b"AMQP\x03") and b"\x00\x53\x12" in answer, path.name


def test_every_finding_stays_fixed(replaying):
    for path in corpus_files():
        replaying.run(path.read_bytes())
    replaying.still_serves()


def test_structure_aware_inputs_find_nothing_and_leave_a_good_client_served(checked):
    @SHORT
    @given(data=client_inputs())
    def fuzz(data: bytes) -> None:
        checked.run(data)

    fuzz()
    checked.still_serves()


CORPUS = [f.read_bytes() for f in corpus_files() if f.name.startswith("sdk-")]


def test_mutated_sdk_sessions_find_nothing_and_leave_a_good_client_served(replaying):
    @settings(SHORT, max_examples=400)
    @given(data=mutated_corpus(CORPUS))
    def fuzz(data: bytes) -> None:
        replaying.run(data)

    fuzz()
    replaying.still_serves()


@pytest.fixture
def served() -> Iterator[Served]:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("the server's descriptors and memory are read from /proc (Linux)")
    with Served.start() as server:
        asyncio.run(server.entities())
        yield server


def test_the_front_door_finds_nothing_and_the_server_gives_back(served):
    """Issue 48, item 7: every way in (the first-byte router, TLS on the AMQPS port and
    sniffed on the AMQP port, HTTP on the AMQP port, AMQP over WebSockets, raw AMQP),
    fuzzed on one ``aiosb serve``, each way reached and answered by the fuzzed inputs
    themselves; then, on that same server, the official client (aio) still sends and
    receives over AMQP, AMQPS and WebSockets, its descriptors and asyncio tasks come
    back to their counts before the run, and its memory stays within a bound of what
    it was after warm-up. The front door's findings (``doors.FOUND``) are replayed
    first."""
    for plan in WARM_UP:
        served.run(plan)
    for name, plan in FOUND.items():  # every finding of the front door stays fixed
        try:
            served.run(plan)
        except Finding as exc:
            raise Finding(f"{name}: {exc}") from exc
    served.still_serves()
    before = served.footprint()
    served.reached.clear()

    for way, content in itertools.product(WAYS_IN, CONTENTS):  # each way as often
        @settings(SHORT, max_examples=FRONT_DOOR_EXAMPLES[content])
        @given(plan=plans(way, content))
        def fuzz(plan: Plan) -> None:
            served.run(plan)

        fuzz()
    served.check_after(before)
    assert not WAYS - set(served.reached), (WAYS - set(served.reached), served.reached)
