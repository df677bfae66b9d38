"""The SASL layer of a connection (AMQP 1.0 part 5.3): the mechanisms offered, and what
each lets in.

- ``MSSBCBS`` (the .NET and Rust SDKs) and ``ANONYMOUS`` (the Python and JavaScript
  SDKs, and any client without a key) pass: the connection has no rights until a token
  is put on ``$cbs`` (:mod:`._cbs`), and a link attached before one is refused.
- ``PLAIN`` with a shared access key's name as the username and its key as the password
  (how Service Bus lets in clients without claims-based security, Qpid JMS in Microsoft's
  guide): the connection has that key's rights on every link and ``$management``
  request, no token needed. A pair that is no key of the server's fails the SASL
  outcome with ``auth``, and the connection closes.

Nothing else is offered (no client certificate maps to a key, so not ``EXTERNAL``); a
mechanism not offered fails with ``auth``, and what is not a sasl-init with ``sys-perm``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ...errors import Unauthorized
from . import performatives as p
from ._cbs import Tokens
from ._framing import Framing
from ._links import ProtocolViolation
from .codec import SASL_HEADER, Array, DecodeError, Symbol, UByte

__all__ = ["MECHANISMS", "SignedIn", "sasl"]

log = logging.getLogger("aiosb.server.amqp")

#: The SASL mechanisms offered, in the order the server prefers them.
MECHANISMS = ("MSSBCBS", "ANONYMOUS", "PLAIN")
#: The sasl-outcome codes (AMQP 5.3.3.6).
OK, AUTH, SYS_PERM = 0, 1, 3
#: Seconds a wrong key name or key waits for its outcome: a guesser is slowed.
WRONG_KEY_WAIT = 0.2


@dataclass(frozen=True, slots=True)
class SignedIn:
    """What a passed SASL layer told: the host the client names (its sasl-init's)."""

    hostname: str | None


async def sasl(conn: Framing, tokens: Tokens) -> SignedIn | None:
    """Run the SASL layer, its header read already: offer :data:`MECHANISMS`, read the
    client's sasl-init, answer with the outcome. A PLAIN key signs ``tokens`` in.
    ``None``: the client failed (told so by the outcome)."""
    conn.writer.write(SASL_HEADER)
    offered = Array(Symbol, [Symbol(m) for m in MECHANISMS])
    conn.send_frame(0, p.performative(p.SASL_MECHANISMS, offered), kind=1)
    try:  # what is not a sasl-init fails the SASL layer (sys-perm), not AMQP's
        kind, _channel, body = await conn.read_frame()
        code, fields, _end = p.parse(body)
        if kind != 1 or code != p.SASL_INIT or not fields:
            raise DecodeError("expected a sasl-init.")
    except (DecodeError, ProtocolViolation) as exc:
        log.info("an AMQP client failed SASL: %s", exc)
        _outcome(conn, SYS_PERM)
        return None
    fields += [None] * (3 - len(fields))
    mechanism, response, hostname = fields[:3]
    try:
        if mechanism == "PLAIN":
            tokens.sign_in(*_plain(response))
        elif mechanism not in MECHANISMS:
            raise Unauthorized(f"the SASL mechanism {str(mechanism)[:40]!r} is not offered: "
                               f"use one of {', '.join(MECHANISMS)}.")
    except Unauthorized as exc:
        log.info("an AMQP client failed SASL: %s", exc.message)
        await asyncio.sleep(WRONG_KEY_WAIT)
        _outcome(conn, AUTH)
        return None
    _outcome(conn, OK)
    await conn.writer.drain()
    return SignedIn(hostname if isinstance(hostname, str) else None)


def _plain(response: Any) -> tuple[str, str]:
    """The username and password of a PLAIN initial response (RFC 4616:
    ``[authzid] NUL authcid NUL passwd``, UTF-8).

    Raises:
        Unauthorized: It is not one.
    """
    parts = response.split(b"\0") if isinstance(response, bytes) else []
    if len(parts) != 3 or not parts[1]:
        raise Unauthorized("a PLAIN sasl-init needs a key name and its key "
                           "(authzid NUL key-name NUL key).")
    try:
        return parts[1].decode("utf-8"), parts[2].decode("utf-8")
    except UnicodeDecodeError:
        raise Unauthorized("the PLAIN key name and key must be UTF-8.") from None


def _outcome(conn: Framing, code: int) -> None:
    conn.send_frame(0, p.performative(p.SASL_OUTCOME, UByte(code)), kind=1)
    conn.flush()
