"""LIKE matching (issue 14 review): the same answers as a regular expression, in time
linear in pattern times text: a pattern such as ``_%a%a%a%a%a%a%a%a%b`` made the regular
expression backtrack for hours on a long text, blocking the broker (a hang fails this test
through its timeout)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from aiosb.sql._values import like_matcher


def reference(pattern: str, text: str) -> bool:
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, re.DOTALL) is not None


@settings(max_examples=400, deadline=None)
@given(st.text("ab%_", max_size=8), st.text("abc", max_size=12))
def test_like_agrees_with_a_regular_expression(pattern, text):
    assert like_matcher(pattern, None)(text) is reference(pattern, text)


def test_a_pattern_that_backtracks_a_regular_expression_is_quick():
    pattern = "_%a%a%a%a%a%a%a%a%a%a%b"
    assert like_matcher(pattern, None)("a" * 5000) is False
    assert like_matcher(pattern, None)("a" * 5000 + "b") is True
