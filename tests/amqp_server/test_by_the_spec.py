"""Issue 47: what the AMQP 1.0 specification has the server write, frame by frame (the
Qpid Proton and rhea tests show the clients that depend on it): the role of the
answering attach, and the SASL layer (only what is honoured is offered; PLAIN with a
key name and key signs the connection in, a wrong pair fails with ``auth``)."""

from __future__ import annotations

from typing import Any

import pytest

from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.server.amqp import performatives as p
from aiosb.server.amqp.codec import AMQP_HEADER, SASL_HEADER, Described, Symbol, UInt, ULong

from .test_hostile import Raw

AUTH = 1  # the sasl-outcome's code for failed credentials (AMQP 5.3.3.6)


def _attach(handle: int, role: bool, address: str) -> Any:
    """A client's attach to ``address``: a sender (role false) or a receiver (true)."""
    return p.performative(
        p.ATTACH, f"link{handle}", UInt(handle), role, None, None,
        Described(ULong(0x28), [address]), Described(ULong(0x29), [address]),
        None, None, None if role else UInt(0),
    )


async def _answer_to(raw: Raw, handle: int) -> list[Any]:
    """The fields of the server's attach answering the client's link ``handle``."""
    while True:
        code, fields = await raw.read()
        assert code != "eof"
        if code == p.ATTACH and fields[0] == f"link{handle}":
            return fields


@pytest.mark.parametrize("node", ["q1", "$cbs", "q1/$management"])
async def test_the_answering_attach_carries_the_opposite_role(server, node):
    """AMQP 2.6.3: the server's end of a client's sender is a receiver (role true), of
    its receiver a sender (role false), on an entity as on ``$cbs`` and
    ``$management`` (Proton matches the answer by name and role)."""
    raw = await Raw.to(server)
    await raw.open()
    await raw.begin()
    await raw.put_token(server.port, "q1")
    raw.send(0, _attach(0, False, node))
    assert (await _answer_to(raw, 0))[2] is True
    raw.send(0, _attach(1, True, node))
    assert (await _answer_to(raw, 1))[2] is False


async def _sasl_init(server: Any, mechanism: str, response: bytes | None
                     ) -> tuple[Raw, list[str]]:
    """A client that read the mechanisms offered (returned) and sent its sasl-init."""
    raw = await Raw.to(server)
    raw.writer.write(SASL_HEADER)
    assert (await raw.read())[0] == "header"
    code, fields = await raw.read()
    assert code == p.SASL_MECHANISMS
    raw.send(0, p.performative(p.SASL_INIT, Symbol(mechanism), response, "localhost"),
             kind=1)
    return raw, list(fields[0])


async def test_only_the_mechanisms_honoured_are_offered(server):
    """EXTERNAL was offered and passed with no certificate behind it: gone."""
    raw, offered = await _sasl_init(server, "ANONYMOUS", b"")
    assert offered == ["MSSBCBS", "ANONYMOUS", "PLAIN"]
    assert (await raw.read())[0] == p.SASL_OUTCOME


@pytest.mark.parametrize("response", [
    b"\0" + DEV_KEY_NAME.encode() + b"\0" + b"not-the-key",
    b"\0nobody\0" + DEV_KEY.encode(),
    DEV_KEY_NAME.encode() + b"\0" + DEV_KEY.encode(),  # no authzid part: not PLAIN's form
    None,
])
async def test_a_plain_pair_that_is_no_key_fails_with_auth_and_closes(server, response):
    raw, _ = await _sasl_init(server, "PLAIN", response)
    assert await raw.sasl_outcome() == AUTH  # read to the end: the socket closed


@pytest.mark.parametrize("mechanism", ["EXTERNAL", "SCRAM-SHA-256"])
async def test_a_mechanism_not_offered_fails_with_auth(server, mechanism):
    raw, _ = await _sasl_init(server, mechanism, b"")
    assert await raw.sasl_outcome() == AUTH


async def test_a_plain_key_passes_sasl_and_opens(server):
    raw, _ = await _sasl_init(server, "PLAIN",
                              b"\0" + DEV_KEY_NAME.encode() + b"\0" + DEV_KEY.encode())
    code, fields = await raw.read()
    assert (code, fields[0]) == (p.SASL_OUTCOME, 0)
    raw.writer.write(AMQP_HEADER)
    assert (await raw.read())[0] == "header"
    raw.send(0, p.performative(p.OPEN, "raw", "localhost"))
    assert (await raw.read())[0] == p.OPEN
    await raw.begin()
    raw.send(0, _attach(0, False, "q1"))  # no token: the key's rights
    await _answer_to(raw, 0)
    code, fields = await raw.read()
    assert code == p.FLOW, (code, fields)  # credit, not a detach with an error

