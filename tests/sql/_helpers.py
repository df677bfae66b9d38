"""Building views for the SQL tests."""

from __future__ import annotations

from typing import Any

from aiosb.message import Message
from aiosb.sql import MessageView

_VIEW_FIELDS = ("sequence_number", "enqueued_time", "delivery_count", "size")


def view(props: dict[str, Any] | None = None, **system: Any) -> MessageView:
    """A view of a message with ``system`` fields (Message fields, or the view's own:
    sequence_number, enqueued_time, delivery_count, size) and user ``props``."""
    extra = {name: system.pop(name) for name in _VIEW_FIELDS if name in system}
    message = Message(b"body", **system)
    return MessageView(message, dict(props or {}), **extra)
