"""What the operators do to values: Service Bus's rules, which follow C#'s.

Values are Python objects: ``None`` (NULL, unknown), ``bool``, ``int`` (Int64), ``float``
(Double), ``str``, ``datetime``, ``timedelta`` (TimeSpan), ``uuid.UUID`` (Guid) and
``bytes``. Callers handle NULL before calling: these functions get no ``None``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import operator
import uuid
from collections.abc import Callable
from typing import Any

from ._errors import FilterEvaluationError

__all__ = [
    "ARITHMETIC",
    "COMPARISONS",
    "INT64_MAX",
    "INT64_MIN",
    "compare_values",
    "int64",
    "kind_name",
    "like_matcher",
    "negate",
    "plus",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_KINDS: dict[type, str] = {
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    _dt.datetime: "date and time",
    _dt.timedelta: "time span",
    uuid.UUID: "GUID",
    bytes: "byte string",
}
_ARTICLE = {"number": "a number", "string": "a string", "boolean": "a boolean",
            "date and time": "a date and time", "time span": "a time span",
            "GUID": "a GUID", "byte string": "a byte string"}


def kind_name(value: object) -> str:
    """``value``'s SQL type, with an article: "a string", "a number"..."""
    kind = _KINDS.get(type(value))
    if kind is None:
        if isinstance(value, _dt.datetime):
            kind = "date and time"
        else:
            return f"a {type(value).__name__}"
    return _ARTICLE[kind]


def _kind(value: object) -> str:
    kind = _KINDS.get(type(value))
    if kind is None and isinstance(value, _dt.datetime):
        return "date and time"
    return kind or type(value).__name__


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def int64(value: int) -> int:
    """``value`` if an Int64 holds it.

    Raises:
        FilterEvaluationError: It overflows (integers are Int64, as Service Bus keeps them).
    """
    if INT64_MIN <= value <= INT64_MAX:
        return value
    raise FilterEvaluationError(f"the integer {value} is out of the Int64 range.")


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
#: The Python function of each comparison operator.
COMPARISONS = _OPS
_EQUALITY_ONLY = frozenset({"boolean", "GUID", "byte string"})


def _utc(value: _dt.datetime) -> _dt.datetime:
    return value.replace(tzinfo=_dt.UTC) if value.tzinfo is None else value


def compare_values(op: str, left: Any, right: Any) -> bool:
    """``left op right`` for two non-NULL values of any types.

    Numbers compare with numbers (integers with decimals too), strings with strings
    (ordinal, case-sensitive), dates with dates (a naive one is UTC), time spans with
    time spans; booleans, GUIDs and byte strings only with = and <>.

    Raises:
        FilterEvaluationError: The types do not compare, as in C#.
    """
    left_kind, right_kind = _kind(left), _kind(right)
    if left_kind != right_kind:
        raise FilterEvaluationError(
            f"cannot compare {kind_name(left)} with {kind_name(right)}: "
            f"{_show(left)} {op} {_show(right)}."
        )
    if left_kind in _EQUALITY_ONLY and op not in ("=", "<>", "!="):
        raise FilterEvaluationError(
            f"{op} does not apply to {left_kind} values ({_show(left)} {op} {_show(right)}); "
            "only = and <> do."
        )
    if left_kind == "date and time":
        left, right = _utc(left), _utc(right)
    elif left_kind not in _KINDS.values():
        raise FilterEvaluationError(f"cannot compare values of type {left_kind}.")
    return _OPS[op](left, right)


# Arithmetic ------------------------------------------------------------------------


def _cs_text(value: Any) -> str:
    """``value`` as C#'s ToString() writes it, for string concatenation."""
    kind = type(value)
    if kind is str:
        return str(value)
    if kind is bool:
        return "True" if value else "False"
    if kind is int:
        return str(value)
    if kind is float:
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "-∞" if value < 0 else "∞"
        text = repr(value)
        if "e" in text:
            mantissa, exponent = text.split("e")
            mantissa = mantissa.removesuffix(".0")
            sign = "-" if exponent.startswith("-") else "+"
            return f"{mantissa}E{sign}{exponent.lstrip('+-').zfill(2)}"
        return text.removesuffix(".0")
    raise FilterEvaluationError(f"cannot add {kind_name(value)} to a string.")


def _number(value: Any) -> bool:
    kind = type(value)
    return kind is int or kind is float


def _mismatch(op: str, left: Any, right: Any) -> FilterEvaluationError:
    return FilterEvaluationError(
        f"{op} does not apply to {kind_name(left)} and {kind_name(right)}: "
        f"{_show(left)} {op} {_show(right)}."
    )


def _add(left: Any, right: Any) -> Any:
    lk, rk = type(left), type(right)
    if lk is int and rk is int:
        return int64(left + right)
    if _number(left) and _number(right):
        return left + right
    if lk is str or rk is str:
        return _cs_text(left) + _cs_text(right)
    if isinstance(left, _dt.datetime) and rk is _dt.timedelta:
        return _shift(left, right)
    if lk is _dt.timedelta and isinstance(right, _dt.datetime):
        return _shift(right, left)
    if lk is _dt.timedelta and rk is _dt.timedelta:
        return _span(left, right, operator.add)
    raise _mismatch("+", left, right)


def _shift(instant: _dt.datetime, span: _dt.timedelta) -> _dt.datetime:
    try:
        return instant + span
    except OverflowError:
        raise FilterEvaluationError(f"{instant} + {span} is out of the date range.") from None


def _span(left: _dt.timedelta, right: _dt.timedelta, op: Callable[[Any, Any], Any]) -> Any:
    try:
        return op(left, right)
    except OverflowError:
        raise FilterEvaluationError("a time span is out of range.") from None


def _subtract(left: Any, right: Any) -> Any:
    lk, rk = type(left), type(right)
    if lk is int and rk is int:
        return int64(left - right)
    if _number(left) and _number(right):
        return left - right
    if isinstance(left, _dt.datetime):
        if isinstance(right, _dt.datetime):
            return _utc(left) - _utc(right)
        if rk is _dt.timedelta:
            return _shift(left, -right)
    if lk is _dt.timedelta and rk is _dt.timedelta:
        return _span(left, right, operator.sub)
    raise _mismatch("-", left, right)


def _multiply(left: Any, right: Any) -> Any:
    if type(left) is int and type(right) is int:
        return int64(left * right)
    if _number(left) and _number(right):
        return left * right
    raise _mismatch("*", left, right)


def _divide(left: Any, right: Any) -> Any:
    if type(left) is int and type(right) is int:
        if right == 0:
            raise FilterEvaluationError(f"{left} / 0: an integer divided by zero.")
        quotient = abs(left) // abs(right)  # C# truncates toward zero
        return int64(quotient if (left < 0) == (right < 0) else -quotient)
    if _number(left) and _number(right):
        if right == 0:  # IEEE 754, as C#'s double: ±infinity, or NaN for 0/0
            if left == 0 or math.isnan(left):
                return math.nan
            return math.copysign(math.inf, left) * math.copysign(1.0, right)
        return left / right
    raise _mismatch("/", left, right)


def _modulo(left: Any, right: Any) -> Any:
    if type(left) is int and type(right) is int:
        if right == 0:
            raise FilterEvaluationError(f"{left} % 0: an integer divided by zero.")
        remainder = abs(left) % abs(right)  # C#: the sign of the dividend
        return remainder if left >= 0 else -remainder
    if _number(left) and _number(right):
        try:
            return math.fmod(left, right)
        except ValueError:  # fmod(x, 0), fmod(inf, x): NaN in C#
            return math.nan
    raise _mismatch("%", left, right)


#: The Python function of each arithmetic operator.
ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add,
    "-": _subtract,
    "*": _multiply,
    "/": _divide,
    "%": _modulo,
}


def negate(value: Any) -> Any:
    """Unary minus: of a number or a time span."""
    kind = type(value)
    if kind is int:
        return int64(-value)
    if kind is float:
        return -value
    if kind is _dt.timedelta:
        return _span(value, value, lambda a, _: -a)
    raise FilterEvaluationError(f"unary - does not apply to {kind_name(value)} ({_show(value)}).")


def plus(value: Any) -> Any:
    """Unary plus: of a number or a time span."""
    if _number(value) or type(value) is _dt.timedelta:
        return value
    raise FilterEvaluationError(f"unary + does not apply to {kind_name(value)} ({_show(value)}).")


# LIKE --------------------------------------------------------------------------------


def _pieces(pattern: str, escape: str | None) -> list[str | None]:
    """The pattern as literal characters and wildcards (None for %, "" for _)."""
    out: list[str | None] = []
    chars = iter(pattern)
    for char in chars:
        if char == escape:
            literal = next(chars, None)
            if literal is None:
                raise FilterEvaluationError(
                    f"the LIKE pattern {pattern!r} ends with its escape character {escape!r}."
                )
            out.append(literal)
        elif char == "%":
            out.append(None)
        elif char == "_":
            out.append("")
        else:
            out.append(char)
    return out


@functools.lru_cache(maxsize=512)
def like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A test of whether a string matches the LIKE ``pattern`` (``%``: any run of
    characters, ``_``: any one; ``escape`` makes the next character literal).
    Case-sensitive.

    Raises:
        FilterEvaluationError: The escape is not one character, or ends the pattern.
    """
    if escape is not None and len(escape) != 1:
        raise FilterEvaluationError(
            f"the LIKE escape must be one character, not {escape!r}."
        )
    pieces = _pieces(pattern, escape)
    if "" not in pieces:  # no _: the fast forms
        literal_runs = "".join(p for p in pieces if p is not None)
        stars = [i for i, p in enumerate(pieces) if p is None]
        n = len(pieces)
        if not stars:
            return literal_runs.__eq__
        if stars == [n - 1]:
            prefix = literal_runs
            return lambda s: s.startswith(prefix)
        if stars == [0]:
            suffix = literal_runs
            return lambda s: s.endswith(suffix)
        if n >= 2 and stars == [0, n - 1]:
            inner = literal_runs
            return lambda s: inner in s
        if all(p is None for p in pieces):
            return lambda s: True
    return _wildcards(pieces)


def _wildcards(pieces: list[str | None]) -> Callable[[str], bool]:
    """The general LIKE test, in time linear in the pattern times the text (a regular
    expression backtracks exponentially on patterns such as ``_%a%a%a%a%b``): the runs
    between ``%`` must appear in order, the first at the start, the last at the end, and
    taking each middle run at its leftmost place is always right."""
    runs: list[list[str]] = [[]]
    for piece in pieces:
        if piece is None:
            runs.append([])
        else:
            runs[-1].append(piece)

    def at(run: list[str], s: str, i: int) -> bool:
        if i < 0 or i + len(run) > len(s):
            return False
        return all(c == "" or s[i + k] == c for k, c in enumerate(run))

    if len(runs) == 1:
        (only,) = runs
        return lambda s: len(s) == len(only) and at(only, s, 0)
    first, middle, last = runs[0], runs[1:-1], runs[-1]

    def test(s: str) -> bool:
        end = len(s) - len(last)
        if end < len(first) or not at(first, s, 0) or not at(last, s, end):
            return False
        pos = len(first)
        for run in middle:
            while pos + len(run) <= end and not at(run, s, pos):
                pos += 1
            if pos + len(run) > end:
                return False
            pos += len(run)
        return True

    return test
