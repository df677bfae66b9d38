"""Tree to closures: each expression becomes one Python function of a :class:`MessageView`.

The compiler walks the tree once. Each node becomes a closure over its children's
closures, with the operator and any constants bound in; constant subtrees are computed
at compile time, and the common shapes (a user property compared with a constant, IN
over a list of constants, LIKE with a constant pattern) get closures of their own. A
condition's closure returns True, False or None (unknown); a value's returns the value,
None for NULL.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, cast

from lark import Token, Tree

from ..errors import InvalidArgument
from ..message import property_name_ok
from ._closures import (
    _compare,
    _compare_user,
    _constant,
    _in_list,
    _Node,
    _place,
    _remove,
    _resolve,
    _resolve_cached,
    _set_system,
    _set_user,
    _unquote,
    _user_reader,
)
from ._compiled import Action, Filter, Fn, Statement
from ._errors import FilterEvaluationError
from ._parse import parse, problem
from ._values import (
    ARITHMETIC,
    INT64_MAX,
    INT64_MIN,
    kind_name,
    like_matcher,
    negate,
    plus,
)
from ._view import MessageView, system_property

__all__ = ["Action", "Filter", "compile_action", "compile_filter"]

_NO_VIEW = cast(MessageView, None)  # what a constant's closure is called with at compile time
_PARAMETER_TYPES = (str, int, float, bool, _dt.datetime, _dt.timedelta, uuid.UUID, type(None))
_FLIP = {"=": "=", "<>": "<>", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def compile_filter(text: str, parameters: Mapping[str, Any] | None = None) -> Filter:
    """Compile a SQL filter (a SqlRuleFilter's expression).

    Args:
        text: The condition, e.g. ``"sys.Label = 'order' AND region IN ('eu', @r)"``.
        parameters: The values of its ``@name`` parameters, keyed ``name`` or ``@name``.

    Raises:
        InvalidArgument: The text is not a condition of the language, names an unknown
            system property or a missing parameter; the sentence says where and why.
    """
    values = _parameters(parameters)
    compiler = _Compiler("filter", values)
    with _not_too_deep("filter"):
        tree = parse(text, "filter")
        node = compiler.condition(cast(Tree[Token], tree.children[0]))
    if node.constant:
        test: Fn = (lambda view: True) if node.value is True else (lambda view: False)
    else:
        test = node.fn
    return Filter(text, values, test)


def compile_action(text: str, parameters: Mapping[str, Any] | None = None) -> Action:
    """Compile a SQL action (a SqlRuleAction's statements): ``SET <property> =
    <expression>`` and ``REMOVE <property>``, separated by optional ``;``.

    Raises:
        InvalidArgument: As :func:`compile_filter`; also a system property that cannot
            be set, or a user property name aiosb cannot carry.
    """
    values = _parameters(parameters)
    compiler = _Compiler("action", values)
    with _not_too_deep("action"):
        tree = parse(text, "action")
        statements = [
            compiler.statement(child) for child in tree.children if isinstance(child, Tree)
        ]
    if len(statements) > MAX_STATEMENTS:
        raise InvalidArgument(
            f"the SQL action has {len(statements)} statements; Service Bus allows "
            f"{MAX_STATEMENTS} in one action."
        )
    return Action(text, values, statements)


#: The most statements (SET, REMOVE) one action may have (Service Bus's quota).
MAX_STATEMENTS = 32


@contextlib.contextmanager
def _not_too_deep(what: str) -> Iterator[None]:
    """An expression nested past what Python's recursion allows (``a+1+1+...`` or
    ``- - - 1``, short as text) is refused, not a crash."""
    try:
        yield
    except RecursionError:
        raise InvalidArgument(
            f"the SQL {what} is nested too deeply to compile; write it with fewer nested "
            "operators or parentheses."
        ) from None


def _parameters(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    if parameters is None:
        return {}
    if not isinstance(parameters, Mapping):
        raise InvalidArgument(
            f"SQL parameters are a dict of names to values, not {type(parameters).__name__}."
        )
    out: dict[str, Any] = {}
    for key, value in parameters.items():
        if not isinstance(key, str) or not key.removeprefix("@"):
            raise InvalidArgument(f"SQL parameter names are non-empty strings, not {key!r}.")
        if not isinstance(value, _PARAMETER_TYPES):
            raise InvalidArgument(
                f"SQL parameter {key!r} is of type {type(value).__name__}; a parameter is "
                "a string, an integer, a float, a boolean, a datetime, a timedelta, a UUID "
                "or None."
            )
        if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            raise InvalidArgument(f"SQL parameter {key!r} = {value} is out of the Int64 range.")
        out[key] = value
    return out


# The compiler ----------------------------------------------------------------------


class _Compiler:
    def __init__(self, what: str, parameters: dict[str, Any]) -> None:
        self.what = what
        self.parameters = parameters

    def error(self, where: Tree[Token] | Token, sentence: str) -> InvalidArgument:
        line, column = _place(where)
        return problem(self.what, line, column, sentence)

    # Positions ---------------------------------------------------------------------

    def node(self, tree: Tree[Token]) -> _Node:
        method: Callable[[Tree[Token]], _Node] = getattr(self, "c_" + str(tree.data))
        return method(tree)

    def value(self, tree: Tree[Token]) -> _Node:
        node = self.node(tree)
        if node.condition:
            raise self.error(
                tree,
                "a condition cannot be used as a value here (a comparison gives no value "
                "to compare, compute or set).",
            )
        return node

    def condition(self, tree: Tree[Token]) -> _Node:
        node = self.node(tree)
        if node.condition or (node.constant and (node.value is None or type(node.value) is bool)):
            return node
        raise self.error(
            tree,
            "expected a condition, such as color = 'red' or EXISTS(color), but found a value.",
        )

    def fold(self, node: _Node, *parts: _Node) -> _Node:
        """``node`` computed now if its parts are constants (and it does not fail)."""
        if all(part.constant for part in parts):
            try:
                value = node.fn(_NO_VIEW)
            except FilterEvaluationError:
                return node  # fails on every message: left to fail there, as Service Bus does
            return replace(node, fn=_constant(value), constant=True, value=value)
        return node

    # Literals ----------------------------------------------------------------------

    def c_number(self, tree: Tree[Token], negative: bool = False) -> _Node:
        token = cast(Token, tree.children[0])
        text = str(token)
        line, column = _place(token)
        if any(c in text for c in ".eE"):
            value: Any = float(text)
            if value in (float("inf"), float("-inf")):
                raise self.error(token, f"the number {text} is out of the Double range.")
            if negative:
                value = -value
        else:
            value = int(text)
            if negative:
                value = -value
            if not INT64_MIN <= value <= INT64_MAX:
                raise self.error(
                    token,
                    f"the integer {'-' if negative else ''}{text} is out of the Int64 range "
                    "(write it with a decimal point for a Double).",
                )
        return _Node(_constant(value), line, column, constant=True, value=value)

    def c_string(self, tree: Tree[Token]) -> _Node:
        token = cast(Token, tree.children[0])
        value = str(token)[1:-1].replace("''", "'")
        return _Node(_constant(value), *_place(token), constant=True, value=value)

    def c_true(self, tree: Tree[Token]) -> _Node:
        return _Node(_constant(True), *_place(tree), constant=True, value=True)

    def c_false(self, tree: Tree[Token]) -> _Node:
        return _Node(_constant(False), *_place(tree), constant=True, value=False)

    def c_null(self, tree: Tree[Token]) -> _Node:
        return _Node(_constant(None), *_place(tree), constant=True, value=None)

    def c_parameter(self, tree: Tree[Token]) -> _Node:
        token = cast(Token, tree.children[0])
        name = str(token)[1:]
        params = self.parameters
        for key in (name, "@" + name):
            if key in params:
                value = params[key]
                break
        else:
            lower = name.lower()
            found = [k for k in params if k.removeprefix("@").lower() == lower]
            if not found:
                given = ", ".join(sorted(params)) or "none"
                raise self.error(
                    token,
                    f"the parameter @{name} has no value (parameters given: {given}).",
                )
            value = params[found[0]]
        return _Node(_constant(value), *_place(token), constant=True, value=value)

    # Properties --------------------------------------------------------------------

    def c_property(self, tree: Tree[Token]) -> _Node:
        token = cast(Token, tree.children[0])
        name = _unquote(token)
        return _Node(_user_reader(name), *_place(token), user=name)

    def c_scoped(self, tree: Tree[Token]) -> _Node:
        scope, token = cast(Token, tree.children[0]), cast(Token, tree.children[1])
        name = _unquote(token)
        kind = str(scope).lower()
        if kind == "user":
            return _Node(_user_reader(name), *_place(scope), user=name)
        if kind == "sys":
            prop = system_property(name)
            if prop is None:
                raise self.error(
                    token,
                    f"Service Bus has no system property sys.{name} (system properties "
                    "include MessageId, CorrelationId, Label, To, ReplyTo, SessionId, "
                    "ContentType, SequenceNumber, EnqueuedTimeUtc).",
                )
            return _Node(prop.read, *_place(scope), system=prop)
        raise self.error(
            scope,
            f"{scope!s}.{name} has an unknown scope {scope!s}: a property is sys.<name>, "
            f"user.<name> or <name> (write [{scope!s}.{name}] for a name with a dot).",
        )

    def c_exists(self, tree: Tree[Token]) -> _Node:
        target = self.node(cast(Tree[Token], tree.children[1]))
        line, column = _place(tree)
        if target.system is not None:
            read = target.system.read

            def exists_system(view: MessageView) -> bool:
                return read(view) is not None

            return _Node(exists_system, line, column, condition=True)
        name = cast(str, target.user)
        lower = name.lower()

        def exists(view: MessageView) -> bool:
            props = view.properties
            return name in props or any(key.lower() == lower for key in props)

        return _Node(exists, line, column, condition=True)

    def c_call(self, tree: Tree[Token]) -> _Node:
        token = cast(Token, tree.children[0])
        arguments = cast(Tree[Token] | None, tree.children[1])
        args = [] if arguments is None else cast(list[Tree[Token]], arguments.children)
        function = str(token).lower()
        line, column = _place(token)
        if function == "newid":
            if args:
                raise self.error(token, "newid() takes no arguments.")
            return _Node(lambda view: uuid.uuid4(), line, column)
        if function in ("property", "p"):
            if len(args) != 1:
                raise self.error(token, f"{token!s}(name) takes one argument, the name.")
            name = self.value(args[0])
            if name.constant:
                if name.value is None:
                    return _Node(_constant(None), line, column, constant=True)
                if type(name.value) is not str:
                    raise self.error(
                        args[0], f"{token!s}(name) takes a string, not {kind_name(name.value)}."
                    )
                try:
                    read = _resolve(name.value)
                except FilterEvaluationError as error:
                    raise self.error(args[0], error.message) from None
                return _Node(read, line, column)
            name_fn = name.fn

            def dynamic(view: MessageView) -> Any:
                text = name_fn(view)
                if text is None:
                    return None
                if type(text) is not str:
                    raise FilterEvaluationError(
                        f"property(name) takes a string, not {kind_name(text)} ({text!r})."
                    )
                return _resolve_cached(text)(view)

            return _Node(dynamic, line, column)
        raise self.error(
            token,
            f"there is no function {token!s}(); the functions are newid(), property(name) "
            "and p(name).",
        )

    # Values ------------------------------------------------------------------------

    def c_sign(self, tree: Tree[Token]) -> _Node:
        sign = str(tree.children[0])
        child = cast(Tree[Token], tree.children[1])
        if str(child.data) == "number":
            return self.c_number(child, negative=sign == "-")
        operand = self.value(child)
        function = negate if sign == "-" else plus
        inner = operand.fn

        def signed(view: MessageView) -> Any:
            value = inner(view)
            return None if value is None else function(value)

        return self.fold(_Node(signed, *_place(tree)), operand)

    def c_arithmetic(self, tree: Tree[Token]) -> _Node:
        left = self.value(cast(Tree[Token], tree.children[0]))
        right = self.value(cast(Tree[Token], tree.children[2]))
        function = ARITHMETIC[str(tree.children[1])]
        lf, rf = left.fn, right.fn

        def arithmetic(view: MessageView) -> Any:
            a = lf(view)
            if a is None:
                return None
            b = rf(view)
            if b is None:
                return None
            return function(a, b)

        return self.fold(_Node(arithmetic, *_place(tree)), left, right)

    # Conditions --------------------------------------------------------------------

    def c_compare(self, tree: Tree[Token]) -> _Node:
        children = tree.children
        op = "=" if len(children) == 2 else str(children[1])
        left = self.value(cast(Tree[Token], children[0]))
        right = self.value(cast(Tree[Token], children[-1]))
        line, column = _place(tree)
        if (left.constant and left.value is None) or (right.constant and right.value is None):
            return _Node(_constant(None), line, column, condition=True, constant=True)
        if left.constant and right.user is not None:
            left, right, op = right, left, _FLIP[op]
        if left.user is not None and right.constant:
            fn = _compare_user(left.user, op, right.value)
        else:
            fn = _compare(op, left.fn, right.fn)
        return self.fold(_Node(fn, line, column, condition=True), left, right)

    def c_not_(self, tree: Tree[Token]) -> _Node:
        operand = self.condition(cast(Tree[Token], tree.children[1]))
        inner = operand.fn

        def not_(view: MessageView) -> Any:
            value = inner(view)
            return None if value is None else not value

        return self.fold(_Node(not_, *_place(tree), condition=True), operand)

    def c_and_(self, tree: Tree[Token]) -> _Node:
        left = self.condition(cast(Tree[Token], tree.children[0]))
        right = self.condition(cast(Tree[Token], tree.children[2]))
        line, column = _place(tree)
        for one, other in ((left, right), (right, left)):
            if one.constant and one.value is False:
                return _Node(_constant(False), line, column, True, True, False)
            if one.constant and one.value is True:
                return replace(other, condition=True, line=line, column=column)
        lf, rf = left.fn, right.fn

        def and_(view: MessageView) -> Any:
            a = lf(view)
            if a is False:
                return False
            b = rf(view)
            if b is False:
                return False
            if a is None or b is None:
                return None
            return True

        return _Node(and_, line, column, condition=True)

    def c_or_(self, tree: Tree[Token]) -> _Node:
        left = self.condition(cast(Tree[Token], tree.children[0]))
        right = self.condition(cast(Tree[Token], tree.children[2]))
        line, column = _place(tree)
        for one, other in ((left, right), (right, left)):
            if one.constant and one.value is True:
                return _Node(_constant(True), line, column, True, True, True)
            if one.constant and one.value is False:
                return replace(other, condition=True, line=line, column=column)
        lf, rf = left.fn, right.fn

        def or_(view: MessageView) -> Any:
            a = lf(view)
            if a is True:
                return True
            b = rf(view)
            if b is True:
                return True
            if a is None or b is None:
                return None
            return False

        return _Node(or_, line, column, condition=True)

    def _null_test(self, tree: Tree[Token], negated: bool) -> _Node:
        operand = self.value(cast(Tree[Token], tree.children[0]))
        inner = operand.fn
        if negated:

            def test(view: MessageView) -> Any:
                return inner(view) is not None

        else:

            def test(view: MessageView) -> Any:
                return inner(view) is None

        return self.fold(_Node(test, *_place(tree), condition=True), operand)

    def c_is_null(self, tree: Tree[Token]) -> _Node:
        return self._null_test(tree, negated=False)

    def c_is_not_null(self, tree: Tree[Token]) -> _Node:
        return self._null_test(tree, negated=True)

    def _in(self, tree: Tree[Token], negated: bool) -> _Node:
        left = self.value(cast(Tree[Token], tree.children[0]))
        arguments = cast(Tree[Token], tree.children[-1])
        items = [self.value(cast(Tree[Token], child)) for child in arguments.children]
        fn = _in_list(left.fn, items)
        if negated:
            positive = fn

            def fn(view: MessageView) -> Any:
                value = positive(view)
                return None if value is None else not value

        return self.fold(_Node(fn, *_place(tree), condition=True), left, *items)

    def c_in_(self, tree: Tree[Token]) -> _Node:
        return self._in(tree, negated=False)

    def c_not_in(self, tree: Tree[Token]) -> _Node:
        return self._in(tree, negated=True)

    def _like(self, tree: Tree[Token], negated: bool) -> _Node:
        parts = [child for child in tree.children if isinstance(child, Tree)]
        left = self.value(parts[0])
        pattern = self.value(parts[1])
        escape = self.value(parts[2]) if len(parts) > 2 else None
        line, column = _place(tree)
        operands = [left, pattern] + ([escape] if escape is not None else [])
        if any(part.constant and part.value is None for part in operands):
            return _Node(_constant(None), line, column, condition=True, constant=True)
        lf = left.fn
        if pattern.constant and (escape is None or escape.constant):
            if type(pattern.value) is not str:
                raise self.error(
                    parts[1], f"a LIKE pattern is a string, not {kind_name(pattern.value)}."
                )
            escape_char = None if escape is None else escape.value
            if escape is not None and type(escape_char) is not str:
                raise self.error(
                    parts[2], f"a LIKE escape is a string, not {kind_name(escape_char)}."
                )
            try:
                matcher = like_matcher(pattern.value, escape_char)
            except FilterEvaluationError as error:
                raise self.error(parts[1], error.message) from None

            def like(view: MessageView) -> Any:
                value = lf(view)
                if value is None:
                    return None
                if type(value) is not str:
                    raise FilterEvaluationError(
                        f"LIKE applies to strings, not {kind_name(value)} ({value!r})."
                    )
                return matcher(value) is not negated

        else:
            pf = pattern.fn
            ef = None if escape is None else escape.fn

            def like(view: MessageView) -> Any:
                value = lf(view)
                if value is None:
                    return None
                pattern_value = pf(view)
                if pattern_value is None:
                    return None
                escape_value = None if ef is None else ef(view)
                if ef is not None and escape_value is None:
                    return None
                for what, got in (("value", value), ("pattern", pattern_value)):
                    if type(got) is not str:
                        raise FilterEvaluationError(
                            f"LIKE takes strings; its {what} is {kind_name(got)} ({got!r})."
                        )
                if escape_value is not None and type(escape_value) is not str:
                    raise FilterEvaluationError(
                        f"a LIKE escape is a string, not {kind_name(escape_value)}."
                    )
                return like_matcher(pattern_value, escape_value)(value) is not negated

        return self.fold(_Node(like, line, column, condition=True), *operands)

    def c_like(self, tree: Tree[Token]) -> _Node:
        return self._like(tree, negated=False)

    def c_not_like(self, tree: Tree[Token]) -> _Node:
        return self._like(tree, negated=True)

    # Actions -----------------------------------------------------------------------

    def statement(self, tree: Tree[Token]) -> Statement:
        target_tree = cast(Tree[Token], tree.children[1])
        target = self.node(target_tree)
        keyword = str(tree.children[0])
        if str(tree.data) == "remove":
            if target.system is not None:
                raise self.error(
                    target_tree,
                    f"REMOVE applies to user properties; clear sys.{target.system.name} "
                    f"with SET sys.{target.system.name} = NULL.",
                )
            return _remove(cast(str, target.user))
        value = self.value(cast(Tree[Token], tree.children[2]))
        if target.system is not None:
            write = target.system.write
            if write is None:
                raise self.error(
                    target_tree,
                    f"{keyword} cannot change sys.{target.system.name}: "
                    f"{target.system.read_only_because}.",
                )
            return _set_system(write, value.fn)
        name = cast(str, target.user)
        if not property_name_ok(name):
            raise self.error(
                target_tree,
                f"{name!r} cannot be a user property name: names are letters, digits and "
                "!#$%&'*+-.^_`|~ only, since the REST protocol carries them as HTTP headers.",
            )
        return _set_user(name, value.fn)


# Closures of the common shapes -----------------------------------------------------
