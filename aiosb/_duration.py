"""Durations as the client takes them: a ``timedelta`` or seconds, checked once.

Imports only :mod:`aiosb.errors`.
"""

from __future__ import annotations

import datetime as _dt
from typing import Literal, overload

from .errors import InvalidArgument

__all__ = ["Duration", "to_seconds"]

#: What an argument that is a duration may be: a ``timedelta`` or seconds.
Duration = _dt.timedelta | float | int


@overload
def to_seconds(name: str, value: Duration | None, *, allow_none: Literal[False] = False) -> float:
    ...


@overload
def to_seconds(name: str, value: Duration | None, *, allow_none: bool) -> float | None:
    ...


def to_seconds(name: str, value: Duration | None, *, allow_none: bool = False) -> float | None:
    """``value`` in seconds (``None`` stays ``None`` if ``allow_none``).

    Raises:
        InvalidArgument: Not a duration, negative or NaN; the sentence names ``name``.
    """
    if value is None:
        if allow_none:
            return None
        raise InvalidArgument(f"{name} must be a duration, not None.")
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgument(f"{name} must be a timedelta or seconds, not {value!r}.")
    if not seconds >= 0:  # NaN too
        raise InvalidArgument(f"{name} is {value}; it must not be negative or NaN.")
    return seconds
