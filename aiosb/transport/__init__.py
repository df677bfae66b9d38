"""The transports: one file per backend, all behind :class:`aiosb.protocol.Transport`.

``memory`` (the embedded emulator, :mod:`aiosb.transport.memory`), ``http``
(:mod:`aiosb.transport.http`: an emulator server or a real namespace over the Service Bus
REST protocol) and ``amqp`` (:mod:`aiosb.transport.amqp`, through the official SDK). The
contract they share lives in :mod:`aiosb.protocol`; its names are re-exported here.
"""

from __future__ import annotations

from ..protocol import (
    MAX_RECEIVE_MESSAGES,
    MAX_RECEIVE_WAIT,
    ManagementRequest,
    ReceiveRequest,
    SessionInfo,
    SessionRequest,
    Settlement,
    Transport,
    check_receive,
)

__all__ = [
    "MAX_RECEIVE_MESSAGES",
    "MAX_RECEIVE_WAIT",
    "check_receive",
    "ManagementRequest",
    "ReceiveRequest",
    "SessionInfo",
    "SessionRequest",
    "Settlement",
    "Transport",
]
