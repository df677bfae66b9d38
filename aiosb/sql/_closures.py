"""The closures the SQL compiler (:mod:`._compile`) builds its expressions from: reading a
user property (exact name first, then ignoring case, as Service Bus documents),
comparing with a constant, IN over a list, and the statements of an action (SET of a
user or system property, REMOVE). Each is a plain function of a :class:`MessageView`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lark import Token, Tree

from ..values import TYPED, plain
from ._compiled import Fn, Statement
from ._errors import FilterEvaluationError
from ._values import (
    COMPARISONS,
    compare_values,
)
from ._view import MessageView, SystemProperty, system_property


@dataclass(slots=True)
class _Node:
    fn: Fn
    line: int
    column: int
    #: A comparison, logic or test: fn gives True, False or None.
    condition: bool = False
    constant: bool = False
    value: Any = None
    #: A user property's name as written, or a system property: for EXISTS and SET.
    user: str | None = None
    system: SystemProperty | None = None


def _constant(value: Any) -> Fn:
    return lambda view: value


def _place(tree: Tree[Token] | Token) -> tuple[int, int]:
    if isinstance(tree, Token):
        return tree.line or 1, tree.column or 1
    meta = tree.meta
    return getattr(meta, "line", 1), getattr(meta, "column", 1)


def _unquote(token: Token) -> str:
    text = str(token)
    if token.type == "DELIMITED":
        return text[1:-1].replace("]]", "]")
    if token.type == "QUOTED":
        return text[1:-1].replace('""', '"')
    return text


def _fold_case(props: dict[str, Any], lower: str) -> Any:
    """The value of the key equal to ``lower`` ignoring case (property names are
    case-insensitive), or None; a typed value as its plain value."""
    for key, value in props.items():
        if key.lower() == lower:
            return plain(value) if value.__class__ in TYPED else value
    return None


def _key(props: dict[str, Any], name: str, lower: str) -> str | None:
    if name in props:
        return name
    for key in props:
        if key.lower() == lower:
            return key
    return None


def _user_reader(name: str) -> Fn:
    lower = name.lower()

    def read(view: MessageView) -> Any:
        props = view.properties
        value = props.get(name)
        if value is None and name not in props:
            return _fold_case(props, lower)
        if value.__class__ in TYPED:  # a long an AMQP client sent ...: its number (#47)
            return plain(value)
        return value

    return read


def _resolve(name: str) -> Fn:
    """The reader of a property named in a string, for property(name)."""
    scope, dot, rest = name.partition(".")
    if dot and scope.lower() == "sys":
        prop = system_property(rest)
        if prop is None:
            raise FilterEvaluationError(f"property({name!r}): Service Bus has no sys.{rest}.")
        return prop.read
    if dot and scope.lower() == "user":
        return _user_reader(rest)
    return _user_reader(name)


_resolve_cached = functools.lru_cache(maxsize=256)(_resolve)


def _compare(op: str, lf: Fn, rf: Fn) -> Fn:
    function = COMPARISONS[op]

    def compare(view: MessageView) -> Any:
        a = lf(view)
        if a is None:
            return None
        b = rf(view)
        if b is None:
            return None
        kind = type(a)
        if kind is type(b) and (kind is str or kind is int or kind is float):
            return function(a, b)
        return compare_values(op, a, b)

    return compare


class _Never:
    """A type no value has: the fast path of a comparison with an unusual constant."""


def _compare_user(name: str, op: str, constant: Any) -> Fn:
    """``<user property> op <constant>``: the shape of most filters, in one closure."""
    lower = name.lower()
    kind = type(constant)
    fast = kind if kind is str or kind is int or kind is float else _Never
    if op == "=":

        def equals(view: MessageView) -> Any:
            props = view.properties
            value = props.get(name)
            if value is None:
                if name in props:
                    return None
                value = _fold_case(props, lower)
                if value is None:
                    return None
            if type(value) is fast:
                return value == constant
            if value.__class__ in TYPED:  # #47: computed as its plain value
                value = plain(value)
            return compare_values("=", value, constant)

        return equals
    function = COMPARISONS[op]

    def compare(view: MessageView) -> Any:
        props = view.properties
        value = props.get(name)
        if value is None:
            if name in props:
                return None
            value = _fold_case(props, lower)
            if value is None:
                return None
        if type(value) is fast:
            return function(value, constant)
        if value.__class__ in TYPED:  # #47: computed as its plain value
            value = plain(value)
        return compare_values(op, value, constant)

    return compare


def _in_slow(value: Any, items: list[Any]) -> bool:
    found = False
    for item in items:
        if item is not None and compare_values("=", value, item):
            found = True
    return found


def _in_list(lf: Fn, items: list[_Node]) -> Fn:
    """``value IN (items)``: unknown when the value is NULL; NULL items match nothing."""
    if all(item.constant for item in items):
        values = [item.value for item in items if item.value is not None]
        kinds = {type(v) for v in values}
        members: frozenset[Any] = frozenset()
        fast: tuple[type, ...] = ()
        if kinds and kinds <= {str}:
            members, fast = frozenset(values), (str,)
        elif kinds and kinds <= {int, float}:
            members, fast = frozenset(values), (int, float)

        def in_constants(view: MessageView) -> Any:
            value = lf(view)
            if value is None:
                return None
            if type(value) in fast:
                return value in members
            return _in_slow(value, values)

        return in_constants
    fns = [item.fn for item in items]

    def in_values(view: MessageView) -> Any:
        value = lf(view)
        if value is None:
            return None
        return _in_slow(value, [fn(view) for fn in fns])

    return in_values


def _set_user(name: str, fn: Fn) -> Statement:
    lower = name.lower()

    def set_user(view: MessageView) -> None:
        value = fn(view)
        props = view.properties
        props[_key(props, name, lower) or name] = value

    return set_user


def _set_system(write: Callable[[MessageView, Any], None], fn: Fn) -> Statement:
    def set_system(view: MessageView) -> None:
        write(view, fn(view))

    return set_system


def _remove(name: str) -> Statement:
    lower = name.lower()

    def remove(view: MessageView) -> None:
        props = view.properties
        key = _key(props, name, lower)
        if key is not None:
            del props[key]

    return remove
