"""Text that is not a filter or an action is refused when compiled, with the place and
the problem in a sentence."""

from __future__ import annotations

import pytest

from aiosb.errors import InvalidArgument
from aiosb.sql import FilterEvaluationError, compile_action, compile_filter

BAD_FILTERS = [
    # text, line, column, words the sentence must hold
    ("color = ", 1, 8, "expected a value after '=', but found the end of the text"),
    ("color = 'red", 1, 9, "string is not closed"),
    ("color == 'red'", 1, 8, "expected a value after '='"),
    ("color = 'red' blue", 1, 15, "expected AND, OR or the end of the text after \"'red'\""),
    ("(color = 'red'", 1, 15, "expected ')'"),
    ("color IN ()", 1, 11, "expected a value after '('"),
    ("color IN ('a', 'b'", 1, 19, "expected ')' or ','"),
    ("color IN 'a'", 1, 10, "expected '('"),
    ("color IS 5", 1, 10, "expected NOT or NULL after 'IS'"),
    ("color NOT 5", 1, 11, "expected IN or LIKE after 'NOT'"),
    ("EXISTS(1)", 1, 8, "expected a property name after '('"),
    ("EXISTS color", 1, 8, "expected '('"),
    ("color LIKE 'a' ESCAPE", 1, 22, "expected a value after 'ESCAPE'"),
    ("# = 1", 1, 1, "the character '#'"),
    ("color = 'red' AND", 1, 18, "expected a condition after 'AND'"),
    ("AND color = 'red'", 1, 1, "expected a condition, but found the keyword 'AND'"),
    ("color = 'red'\n  AND = 3", 2, 7, "expected a condition after 'AND'"),
    ("set = 1", 1, 1, "write [set] for a property of that name"),
    ("a.b.c = 1", 1, 4, "expected an operator"),
    ("foo.bar = 1", 1, 1, "unknown scope foo"),
    ("sys.Nonsense = 1", 1, 5, "no system property sys.Nonsense"),
    ("sys.[Label] = 'x' AND sys.Foo = 1", 1, 27, "no system property sys.Foo"),
    ("color", 1, 1, "expected a condition"),
    ("color + 1", 1, 1, "expected a condition"),
    ("'red'", 1, 1, "expected a condition"),
    ("NOT color", 1, 5, "expected a condition"),
    ("color = 'red' AND quantity", 1, 19, "expected a condition"),
    ("(color = 'red') = TRUE", 1, 2, "a condition cannot be used as a value"),
    ("(a = 1) + 1 = 2", 1, 2, "a condition cannot be used as a value"),
    ("x = @missing", 1, 5, "the parameter @missing has no value"),
    ("x = 9223372036854775808", 1, 5, "out of the Int64 range"),
    ("x = -9223372036854775809", 1, 6, "out of the Int64 range"),
    ("x = 1e999", 1, 5, "out of the Double range"),
    ("x LIKE 5", 1, 8, "a LIKE pattern is a string"),
    ("x LIKE 'a' ESCAPE 5", 1, 19, "a LIKE escape is a string"),
    ("x LIKE 'a' ESCAPE '!!'", 1, 8, "the LIKE escape must be one character"),
    ("x LIKE 'ab!' ESCAPE '!'", 1, 8, "ends with its escape character"),
    ("x = nosuch(1)", 1, 5, "there is no function nosuch()"),
    ("x = newid(1)", 1, 5, "newid() takes no arguments"),
    ("x = p()", 1, 5, "takes one argument"),
    ("p(5) = 1", 1, 3, "takes a string"),
    ("p('sys.Nope') = 1", 1, 3, "no sys.Nope"),
    ("[unclosed = 1", 1, 1, "bracketed name is not closed"),
    ('"unclosed = 1', 1, 1, "quoted name is not closed"),
    ("x = @", 1, 5, "a parameter is written @name"),
    ("", 1, 1, "it is empty"),
    ("   \n ", 1, 1, "it is empty"),
    ("SET x = 1", 1, 1, "expected a condition, but found the keyword 'SET'"),
]


@pytest.mark.parametrize(("text", "line", "column", "words"), BAD_FILTERS)
def test_bad_filter_is_refused_naming_the_place(text: str, line: int, column: int, words: str):
    with pytest.raises(InvalidArgument) as caught:
        compile_filter(text)
    sentence = str(caught.value)
    assert sentence.startswith(f"the SQL filter has a problem at line {line}, column {column}: ")
    assert words in sentence
    assert sentence.endswith(".")


BAD_ACTIONS = [
    ("SET", 1, 4, "expected a property name after 'SET'"),
    ("SET a 1", 1, 7, "expected '=' or '.' after 'a'"),
    ("SET a = ", 1, 8, "expected a value after '='"),
    ("SET a = 1,  SET b = 2", 1, 10, "found ','"),
    ("REMOVE", 1, 7, "expected a property name"),
    ("REMOVE a = 1", 1, 10, "expected"),
    ("a = 1", 1, 1, "expected SET or REMOVE"),
    ("SET a = b = c", 1, 11, "found '='"),
    ("SET a = (b = c)", 1, 10, "a condition cannot be used as a value"),
    ("SET sys.SequenceNumber = 1", 1, 5, "cannot change sys.SequenceNumber: it is read-only"),
    ("SET sys.EnqueuedTimeUtc = NULL", 1, 5, "read-only"),
    ("SET sys.LockToken = 'x'", 1, 5, "aiosb does not carry it"),
    ("REMOVE sys.To", 1, 8, "REMOVE applies to user properties"),
    ("SET sys.Nope = 1", 1, 9, "no system property sys.Nope"),
    ("SET [two words] = 1", 1, 5, "cannot be a user property name"),
    ("SET a = @p", 1, 9, "the parameter @p has no value"),
    ("SET set = 1", 1, 5, "write [set] for a property of that name"),
    ("", 1, 1, "it is empty"),
]


@pytest.mark.parametrize(("text", "line", "column", "words"), BAD_ACTIONS)
def test_bad_action_is_refused_naming_the_place(text: str, line: int, column: int, words: str):
    with pytest.raises(InvalidArgument) as caught:
        compile_action(text)
    sentence = str(caught.value)
    assert sentence.startswith(f"the SQL action has a problem at line {line}, column {column}: ")
    assert words in sentence


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        ([1, 2], "a dict of names to values"),
        ({"": 1}, "non-empty strings"),
        ({1: 1}, "non-empty strings"),
        ({"p": [1]}, "of type list"),
        ({"p": object()}, "of type object"),
        ({"p": 2**63}, "out of the Int64 range"),
    ],
)
def test_bad_parameters_are_refused(parameters: object, words: str):
    with pytest.raises(InvalidArgument, match=words):
        compile_filter("x = 1", parameters)  # type: ignore[arg-type]  # the point


def test_text_must_be_a_string():
    with pytest.raises(InvalidArgument, match="a SQL filter is a string, not bytes"):
        compile_filter(b"x = 1")  # type: ignore[arg-type]  # the point
    with pytest.raises(InvalidArgument, match="a SQL action is a string, not NoneType"):
        compile_action(None)  # type: ignore[arg-type]  # the point


def test_compile_errors_are_value_errors_and_not_evaluation_errors():
    with pytest.raises(ValueError) as caught:
        compile_filter("x =")
    assert not isinstance(caught.value, FilterEvaluationError)


def test_an_error_that_every_message_would_hit_is_left_to_evaluation():
    """'a' = 1 is a type error, as in Service Bus it fails when evaluated, not when made."""
    compiled = compile_filter("'a' = 1")
    from ._helpers import view

    with pytest.raises(FilterEvaluationError, match="cannot compare a string with a number"):
        compiled.matches(view())
