"""The framed form of aiosb's batch requests and answers (#16): the bodies of a batch
travel raw after its JSON, instead of as base64 inside it.

A framed HTTP body is the JSON of the payload, whose ``batch`` object has no ``body``,
then every body of the batch, one after another (the batch's ``body_sizes`` say where
each ends). Its content type is :data:`CONTENT_TYPE` and the :data:`LENGTH_HEADER`
header gives the JSON's length in bytes. Base64 cost about 2,000 instructions a 64-byte
body each way, and four times as much memory traffic as the bytes themselves.

Who frames what: aiosb's server answers a batch receive framed when the request's
``Accept`` names :data:`CONTENT_TYPE`, and says on every ``$aiosb`` answer
(:data:`TAKES_FRAMES`) that it takes framed sends; aiosb's client frames its batch sends
while the answers say so (a framed batch refused with 400 goes once more as JSON).
Either side talks plain JSON to one that does not know frames.
Imports only the vocabulary.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument
from .json_values import dumps, loads

__all__ = ["CONTENT_TYPE", "LENGTH_HEADER", "TAKES_FRAMES", "frame", "unframe"]

CONTENT_TYPE = "application/vnd.aiosb.frame"
LENGTH_HEADER = "Aiosb-Json-Length"
TAKES_FRAMES = "Aiosb-Takes-Frames"


def frame(payload: dict[str, Any]) -> tuple[bytes, int]:
    """``payload``, whose ``batch`` holds its bodies as a list of bytes in ``body`` (the
    batch encoders' ``raw`` form), framed: the bytes to send (one copy of the bodies)
    and the JSON's length. The ``body`` is taken out of the batch."""
    bodies: list[bytes] = payload["batch"].pop("body")
    data = dumps(payload)
    return b"".join([data, *bodies]), len(data)


def asks_for_frames(accept: str) -> bool:
    """Whether an ``Accept`` header names :data:`CONTENT_TYPE` (in any case, and not
    with ``q=0``)."""
    for item in accept.split(","):
        kind, *params = item.split(";")
        if kind.strip().lower() == CONTENT_TYPE:
            return not any(
                p.strip().lower().replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000")
                for p in params
            )
    return False


def unframe(data: bytes, length: str) -> dict[str, Any]:
    """The payload of a framed body (``length``: the :data:`LENGTH_HEADER` header), its
    batch's ``body`` the raw bytes after the JSON, as the batch decoders take them.

    Raises:
        InvalidArgument: A length that is not a whole number within the body, JSON
            that is not an object with a ``batch`` object, or a ``body`` in that batch.
    """
    if (
        not (length.isascii() and length.isdigit())
        or len(length) > 19  # int() of thousands of digits is refused, and slow
        or not 0 < int(length) <= len(data)
    ):
        raise InvalidArgument(
            f"{LENGTH_HEADER} is {length[:40]!r}: it must be the length in bytes of the "
            f"JSON at the start of the body ({len(data)} bytes)."
        )
    end = int(length)
    try:
        payload = loads(data[:end])
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"the body's JSON is not valid: {str(exc)[:120]}.") from None
    batch = payload.get("batch") if isinstance(payload, dict) else None
    if not isinstance(batch, dict) or "body" in batch:
        raise InvalidArgument(
            "a framed body is a JSON object with a batch object, whose bodies follow the "
            "JSON (the batch has no body of its own)."
        )
    batch["body"] = data[end:]
    framed: dict[str, Any] = payload
    return framed
