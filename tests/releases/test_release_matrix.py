"""#47: every release of the official Python SDK that aiosb supports runs the everyday
scenario against ``aiosb serve`` (tests/releases/matrix.py, scenario.py): the declared
floor's newest patch, 7.13, 7.14.3 (Microsoft's emulator kit pins it) and the newest
7.x, each from a venv of its own. Before #47 every release but 7.15 failed on the first
frame ("list index out of range": aiosb left trailing null fields off its
performatives). The matrix runs beside the suite (``runs_in_background``); each test
waits for it and checks its release's report."""

from __future__ import annotations

from typing import Any

import pytest

from .matrix import RELEASES, MatrixRun, prefix

pytest.importorskip("cryptography")  # the administration client needs HTTPS

RUN = MatrixRun()


def expected(name: str, release: str) -> dict[str, Any]:
    """What the scenario reports when every step went as against Service Bus."""
    return {
        "release": release, "step": "done",
        "admin": {"got": [f"{prefix(name)}-spare", 3], "listed": True, "deleted": True},
        "scheduled": 1,
        "peeked": ["m0", "m1", "m2"],  # the scheduled message is cancelled, not peeked
        "received": ["m0:0", "m1:1", "m2:2"],
        "left": 0,
        "session": {"id": "s1", "state": "state-1", "received": ["in a session"]},
        "missing": missing(release),
    }


def missing(release: str) -> str:
    """The error a sender to a queue that does not exist gets: Service Bus answers the
    put-token for it 404 (#47), which 7.14 and later raise as an authentication error
    and 7.12 and 7.13 as a connection error (the SDK's own reading, as against Azure),
    never a crash inside the client."""
    major, minor = (int(part) for part in release.split(".")[:2])
    return "ServiceBusAuthenticationError" if (major, minor) >= (7, 14) \
        else "ServiceBusConnectionError"


@pytest.mark.timeout(900)
@pytest.mark.runs_in_background(RUN)
@pytest.mark.parametrize("name", list(RELEASES))
def test_the_release_runs_the_everyday_scenario(name: str) -> None:
    report = RUN.report(name, timeout=870)
    assert "error" not in report, f"{report.get('release')} at {report.get('step')}: " \
        f"{report['error']}\n{report.get('traceback', '')}"
    release = report["release"]
    if name != "newest-7":  # the release asked for (a line's newest patch, or exact)
        line = name.removeprefix("floor-")
        assert release == line or release.startswith(line + "."), release
    assert report == expected(name, release)


#: What the transport scenario receives back: each property's class and value, the
#: class naming its AMQP type (tests/releases/transport_scenario.py's SENT).
TYPED = {
    "long": ["Long", 1], "ubyte": ["UByte", 200], "symbol": ["Symbol", "sym"],
    "short": ["Short", -300], "uint": ["UInt", 4_000_000_000], "ulong": ["ULong", 2**63],
    "float": ["Float32", 1.5], "char": ["Char", "é"], "int": ["int", 7],
    "string": ["str", "text"],
}


@pytest.mark.timeout(900)
@pytest.mark.runs_in_background(RUN)
@pytest.mark.parametrize("name", list(RELEASES))
def test_aiosbs_transport_keeps_property_types_on_the_release(name: str) -> None:
    """aiosb's own AMQP transport (``aiosb.connect(connection_string)``) on each
    release: a message with typed properties sent and received back with its types.
    The transport teaches the SDK's codec the types by replacing its map decoders
    (aiosb/transport/amqp/_typed_values.py); before 7.15 the SDK's decoders take the buffer
    alone, and a replacement that handed them the nesting depth broke every frame that
    holds a map on 7.12 to 7.14 (``_decode_binary_small() takes 1 positional argument
    but 2 were given``)."""
    report = RUN.report(name, timeout=870, transport=True)
    assert "error" not in report, f"{report.get('release')} at {report.get('step')}: " \
        f"{report['error']}\n{report.get('traceback', '')}"
    assert report == {"release": report["release"], "step": "done", "received": TYPED}
