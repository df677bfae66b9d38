"""The state of one connection's sessions and links, the flow-control constants and
the limits a client's OPEN, BEGIN and ATTACH are held to (see :mod:`.connection`)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...protocol import ReceiveMode

__all__ = [
    "CHANNEL_MAX", "CREDIT", "HANDLE_MAX", "LONG_POLL", "MAX_FRAME", "WINDOW", "Link",
    "IDLE_SECONDS", "ProtocolViolation", "Session", "after", "beat", "check_channel",
    "check_handle", "heartbeat_interval", "hold_reply", "reply_link", "room_for_reply",
    "since", "watch_idle",
]

#: The largest frame we take (a whole standard-tier batch fits in one).
MAX_FRAME = 1024 * 1024
#: Session incoming window, in transfers.
WINDOW = 5000
#: Link credit given to a client's sender link.
CREDIT = 1000
#: How long one broker receive waits before the receiver link asks again (seconds).
LONG_POLL = 30.0
#: The highest channel a session may have, and the highest link handle in one.
CHANNEL_MAX = 255
HANDLE_MAX = 2**32 - 1
#: The most links one session may have open at once.
MOST_LINKS = 4096
#: The least idle timeout (ms) whose half the server beats at: a client's 1 ms would
#: have it write a frame every half millisecond.
LEAST_IDLE = 2000
#: A connection the client sends nothing on for this long is closed: the idle-time-out
#: our OPEN advertises, Service Bus's (the SDKs send a heartbeat at half of it).
IDLE_SECONDS = 120.0
_EMPTY_FRAME = struct.pack(">IBBH", 8, 2, 0, 0)
#: The most replies (``$cbs``, ``$management``) a link holds for want of the client's
#: credit: a client that asks and never takes its answers would fill the server's memory.
MOST_REPLIES = CREDIT
#: Transfer ids and delivery counts are sequence numbers of 32 bits (AMQP 2.8.9,
#: RFC 1982): they wrap around, and a client may start them anywhere.
SEQUENCE = 2**32


class ProtocolViolation(Exception):
    """The peer broke the protocol: close the connection with ``condition``."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


@dataclass(slots=True)
class Link:
    """One attached link, as the server sees it.

    ``kind`` is ``cbs`` (the ``$cbs`` node), ``management`` (an entity's
    ``$management`` node: requests in on one link, replies out on its pair) or
    ``entity`` (messages).
    """

    name: str
    handle: int  # the client's handle
    our_handle: int
    receiving: bool  # the client sends, we receive
    address: str
    kind: str
    path: str = ""
    credit: int = 0  # receiving: credit left; sending: the client's credit left
    delivery_count: int = 0
    outbox: deque[bytes] = field(default_factory=deque)
    partial: bytearray | None = None
    partial_id: int | None = None
    partial_format: int = 0
    partial_settled: bool = False
    partial_over: bool = False
    mode: ReceiveMode = "peek_lock"  # what the client receives
    sub_queue: str | None = None
    drain: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Sending: the task that sends what the link has; receiving: the task serving its
    #: transfers in order (``inbox``: payload, delivery id, format, settled, over-size).
    pump: asyncio.Task[None] | None = None
    inbox: deque[tuple[bytes, int | None, int, bool, bool]] = field(default_factory=deque)
    serving_settled: bool = False  # the transfer being served came settled
    #: Sending: the broker receive waiting for messages, and how many it asked for.
    poll: asyncio.Future[Any] | None = None
    asked: int = 0
    #: A reply link: the client has given it credit (:meth:`~._pump.ReceiverLinks._pump`).
    given: bool = False
    #: A session receiver: the session it holds and the broker's lock on it.
    session_id: str | None = None
    session_lock: str | None = None


@dataclass(slots=True)
class Session:
    """One begun session; our channel number is the client's."""

    channel: int
    next_incoming_id: int
    incoming_window: int = WINDOW
    next_outgoing_id: int = 0  # the transfer-id of our next transfer frame (2.5.6)
    next_delivery_id: int = 0  # the delivery-id of our next delivery (2.6.12)
    remote_incoming_window: int = 0
    links: dict[int, Link] = field(default_factory=dict)
    unsettled: dict[int, tuple[Link, str]] = field(default_factory=dict)
    handles: itertools.count[int] = field(default_factory=itertools.count)


def after(number: int, count: int = 1) -> int:
    """The sequence number ``count`` after ``number``, wrapping at 2**32."""
    return (number + count) % SEQUENCE


def since(later: int, earlier: int) -> int:
    """How many sequence numbers from ``earlier`` on to ``later`` (RFC 1982, wrapping at
    2**32): negative when ``later`` comes first (a peer's count ahead of ours), and a
    distance of 2**31 or more reads as that."""
    distance = (later - earlier) % SEQUENCE
    return distance - SEQUENCE if distance >= SEQUENCE // 2 else distance


async def beat(writer: asyncio.StreamWriter, every: float) -> None:
    """Write an empty frame every ``every`` seconds (the heartbeat a client's idle
    timeout asks for), but none while the client does not read what we wrote."""
    while True:
        await asyncio.sleep(every)
        if writer.is_closing():
            return
        if writer.transport.get_write_buffer_size() < 65536:
            writer.write(_EMPTY_FRAME)


async def watch_idle(heard: Callable[[], float],
                     fail: Callable[[ProtocolViolation], None]) -> None:
    """Call ``fail`` once nothing was heard (``heard()``: the loop time of the client's
    last frame) for :data:`IDLE_SECONDS`, as AMQP's idle timeout has a peer do (2.4.5),
    with what Service Bus closes an inactive connection with (the SDKs reconnect)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(max(1.0, heard() + IDLE_SECONDS - loop.time()))
        if loop.time() - heard() >= IDLE_SECONDS:
            fail(ProtocolViolation(
                "amqp:connection:forced",
                f"The connection was inactive for more than the allowed "
                f"{IDLE_SECONDS * 1000:.0f} milliseconds and is closed by container 'aiosb'.",
            ))
            return


def reply_link(session: Session, request: Link) -> Link | None:
    """The client's receiver link of the ``$management`` node ``request`` asks on."""
    for link in session.links.values():
        if (link.kind == "management" and not link.receiving and link.path == request.path
                and link.sub_queue == request.sub_queue):
            return link
    return None


def room_for_reply(link: Link | None) -> None:
    """Refuse a request whose reply ``link`` holds :data:`MOST_REPLIES` waiting for the
    client's credit already: asked before the operation is done, so none takes effect
    with no reply to say so."""
    if link is not None and len(link.outbox) >= MOST_REPLIES:
        raise ProtocolViolation(
            "amqp:resource-limit-exceeded",
            f"{MOST_REPLIES} replies wait on link {str(link.name)[:80]!r} for credit the "
            "client does not give.",
        )


def hold_reply(link: Link, reply: bytes) -> None:
    """Queue ``reply`` on ``link`` (a ``$cbs`` or ``$management`` reply link) until the
    client gives credit for it; refused beyond :data:`MOST_REPLIES` waiting."""
    room_for_reply(link)
    link.outbox.append(reply)


def heartbeat_interval(idle: Any) -> float | None:
    """Seconds between the heartbeats a client's OPEN asks for with its idle-time-out
    (milliseconds): half of it, as AMQP asks, at most one a second; ``None``: none."""
    if idle is not None and (type(idle) is not int or idle < 0):
        raise ProtocolViolation("amqp:invalid-field", "idle-time-out must be milliseconds.")
    return max(idle, LEAST_IDLE) / 2000 if idle else None


def check_channel(channel: int, sessions: dict[int, Session]) -> None:
    """Refuse a BEGIN on a channel over the limit, or on one that has a session."""
    if channel > CHANNEL_MAX:
        raise ProtocolViolation(
            "amqp:connection:framing-error", f"channel {channel} is over {CHANNEL_MAX}."
        )
    if channel in sessions:
        raise ProtocolViolation("amqp:not-allowed", f"channel {channel} has a session.")


def check_handle(handle: Any, session: Session) -> int:
    """An ATTACH's handle, refused if it is not one, is in use (the old link would go on
    unseen: a receive-and-delete pump taking messages for nobody), or is one link too
    many for the session."""
    if type(handle) is not int or not 0 <= handle <= HANDLE_MAX:
        raise ProtocolViolation("amqp:invalid-field", f"handle {handle!r} is not one.")
    if handle in session.links:
        raise ProtocolViolation("amqp:session:handle-in-use", f"handle {handle} is in use.")
    if len(session.links) >= MOST_LINKS:
        raise ProtocolViolation(
            "amqp:resource-limit-exceeded", f"a session may have {MOST_LINKS} links open."
        )
    return handle
