"""Text to tree: the grammar (``grammar.lark``, loaded once), and syntax errors in words."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ..errors import InvalidArgument

__all__ = ["KEYWORDS", "parse", "problem"]

#: The reserved words (case-insensitive): a property named like one is written [bracketed].
KEYWORDS = frozenset(
    "AND OR NOT IS NULL IN LIKE ESCAPE EXISTS TRUE FALSE SET REMOVE".split()
)


@functools.cache
def _parser() -> Lark:
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text("utf-8")
    return Lark(
        grammar,
        parser="lalr",
        lexer="basic",
        start=["filter", "action"],
        propagate_positions=True,
        maybe_placeholders=True,
    )


def problem(what: str, line: int, column: int, sentence: str) -> InvalidArgument:
    """The compile error: ``what`` ("filter" or "action") has ``sentence`` at a place."""
    return InvalidArgument(
        f"the SQL {what} has a problem at line {line}, column {column}: {sentence}"
    )


def parse(text: str, start: str) -> Tree[Token]:
    """The tree of ``text`` from ``start`` (``"filter"`` or ``"action"``).

    Raises:
        InvalidArgument: The text is not in the language; the sentence names the line,
            the column and what was expected there.
    """
    what = start
    if not isinstance(text, str):
        raise InvalidArgument(f"a SQL {what} is a string, not {type(text).__name__}.")
    if not text.strip():
        example = "color = 'red'" if what == "filter" else "SET color = 'red'"
        raise problem(what, 1, 1, f"it is empty; write for example {example}.")
    try:
        return _parser().parse(text, start=start)
    except UnexpectedInput as error:
        raise _syntax_error(text, what, error) from None


# Syntax errors in words ------------------------------------------------------------

_VALUE_STARTS = frozenset(
    {"NUMBER", "STRING", "NAME", "DELIMITED", "QUOTED", "PARAMETER", "TRUE", "FALSE",
     "NULL", "SIGN", "_LPAR"}
)
_NAMES = frozenset({"NAME", "DELIMITED", "QUOTED"})
_WORDS = {
    "AND": "AND",
    "OR": "OR",
    "NOT": "NOT",
    "IS": "IS",
    "IN": "IN",
    "LIKE": "LIKE",
    "ESCAPE": "ESCAPE",
    "NULL": "NULL",
    "COMPARE": "a comparison (= <> != < <= > >=)",
    "_EQ": "'='",
    "SIGN": "+ or -",
    "TIMES": "*, / or %",
    "_RPAR": "')'",
    "_LPAR": "'('",
    "_COMMA": "','",
    "_DOT": "'.'",
    "_SEMI": "';'",
    "SET": "SET",
    "REMOVE": "REMOVE",
    "$END": "the end of the text",
}
_ORDER = list(_WORDS)


_OPERATORS = frozenset(
    {"COMPARE", "_EQ", "IS", "IN", "LIKE", "NOT", "SIGN", "TIMES", "AND", "OR", "ESCAPE"}
)


def _expected(accepts: set[str]) -> str:
    """What the parser could have taken, in words."""
    phrases: list[str] = []
    if "NUMBER" in accepts:
        phrases.append("a condition" if "EXISTS" in accepts else "a value")
        accepts = accepts - _VALUE_STARTS - {"NOT", "EXISTS"}
    elif accepts & _NAMES:
        phrases.append("a property name")
        accepts = accepts - _NAMES
    if "COMPARE" in accepts:  # after a whole value
        phrases.append("an operator (= <> < > IS IN LIKE + - * / % AND OR)")
        accepts = accepts - _OPERATORS
    if accepts - {"SIGN", "TIMES"} or phrases:
        accepts = accepts - {"SIGN", "TIMES"}  # always possible after a value: implied
    phrases += [_WORDS[name] for name in _ORDER if name in accepts]
    phrases += sorted(name for name in accepts if name not in _WORDS)
    if not phrases:
        return "something else"
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " or " + phrases[-1]


def _describe(token: Token) -> str:
    if token.type == "$END":
        return "the end of the text"
    value = str(token)
    shown = value if len(value) <= 40 else value[:37] + "..."
    if token.type in KEYWORDS:
        return f"the keyword {shown!r}"
    if token.type == "STRING":
        return f"the string {shown}"
    if token.type == "NUMBER":
        return f"the number {shown}"
    return repr(shown)


def _previous(text: str, position: int) -> Token | None:
    """The last token that ends at or before ``position``."""
    last: Token | None = None
    try:
        for token in _parser().lex(text):
            if token.start_pos is None or token.start_pos >= position:
                break
            last = token
    except UnexpectedInput:
        pass
    return last


def _end_place(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    return line, len(stripped) - (stripped.rfind("\n") + 1) + 1


def _syntax_error(text: str, what: str, error: UnexpectedInput) -> InvalidArgument:
    if isinstance(error, UnexpectedCharacters):
        line, column = error.line, error.column
        char = error.char
        if char == "'":
            sentence = (
                "this string is not closed; a string ends with ' (write '' for a quote in it)."
            )
        elif char == "[":
            sentence = "this bracketed name is not closed with ] (write ]] for a ] in it)."
        elif char == '"':
            sentence = 'this quoted name is not closed with " (write "" for a " in it).'
        elif char == "@":
            sentence = "a parameter is written @name, with letters, digits or _ after the @."
        else:
            sentence = f"the character {char!r} has no meaning here."
        return problem(what, line, column, sentence)
    assert isinstance(error, UnexpectedToken)
    token = error.token
    try:
        replay: Callable[[], set[str]] = error.interactive_parser.accepts
        accepts = set(replay())
    except Exception:  # pragma: no cover - accepts() replays the parser; never expected
        accepts = set(error.expected)
    position = token.start_pos if token.type != "$END" else len(text)
    if token.type == "$END" or position is None:
        line, column = _end_place(text)
        position = len(text)
    else:
        line, column = token.line or 1, token.column or 1
    before = _previous(text, position)
    expected = _expected(accepts)
    after = f" after {str(before)!r}" if before is not None else ""
    sentence = f"expected {expected}{after}, but found {_describe(token)}."
    if token.type in KEYWORDS and accepts & _NAMES:
        sentence += (
            f" {str(token)!r} is a keyword: write [{token}] for a property of that name."
        )
    return problem(what, line, column, sentence)
