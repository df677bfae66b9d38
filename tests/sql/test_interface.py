"""The interface the broker calls, and the promise that an expression is parsed once."""

from __future__ import annotations

import datetime as dt
import importlib.resources
import pathlib

import pytest

import aiosb.sql
from aiosb.message import Message, ReceivedMessage
from aiosb.sql import Action, Filter, MessageView, _parse, compile_action, compile_filter

from ._helpers import view


def test_public_names():
    assert sorted(aiosb.sql.__all__) == [
        "Action", "Filter", "FilterEvaluationError", "MessageView", "compile_action",
        "compile_filter",
    ]


def test_the_brief_example():
    f = compile_filter("sys.Label = 'order' AND region IN ('eu', @r)", {"r": "us"})
    assert isinstance(f, Filter)
    assert f.text == "sys.Label = 'order' AND region IN ('eu', @r)"
    assert f.parameters == {"r": "us"}
    assert f.matches(view({"region": "us"}, subject="order")) is True
    assert f.matches(view({"region": "asia"}, subject="order")) is False
    assert f.matches(view({"region": "us"}, subject="invoice")) is False
    a = compile_action("SET region = 'x'; REMOVE tmp", parameters=None)
    assert isinstance(a, Action)
    assert a.text == "SET region = 'x'; REMOVE tmp"
    v = view({"region": "us", "tmp": 1})
    assert a.apply(v) is None
    assert v.properties == {"region": "x"}


def test_the_view_copies_nothing_and_takes_any_message_like_object():
    class Record:  # the broker's own record, with Message's attributes
        subject = "order"
        to = None
        size = 77

    props = {"a": 1}
    v = MessageView(Record(), props, sequence_number=5, delivery_count=2)
    assert v.properties is props
    assert v.system_changes == {}
    assert compile_filter("sys.Label = 'order' AND a = 1").matches(v)
    assert compile_filter("sys.Size = 77 AND sys.SequenceNumber = 5").matches(v)
    assert compile_filter("sys.DeliveryCount = 2").matches(v)
    assert "order" not in repr(v) and "{'a': 1}" in repr(v)


def test_a_received_message_works_as_the_message():
    message = ReceivedMessage(b"x", subject="s", sequence_number=9)
    v = MessageView(message, {}, sequence_number=message.sequence_number)
    assert compile_filter("sys.Subject = 's' AND sys.SequenceNumber = 9").matches(v)


def test_size_defaults_to_the_messages_size():
    message = Message(b"12345", subject="ab")
    assert compile_filter(f"sys.Size = {message.size}").matches(MessageView(message, {}))


def test_expires_at_is_enqueued_time_plus_time_to_live():
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    message = Message(b"", time_to_live=dt.timedelta(hours=1))
    v = MessageView(message, {}, enqueued_time=at)
    f = compile_filter("sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = sys.TimeToLive")
    assert f.matches(v)


def test_the_grammar_is_one_file_loaded_once():
    grammar = importlib.resources.files("aiosb.sql").joinpath("grammar.lark")
    assert grammar.is_file()
    assert _parse._parser() is _parse._parser()
    package = pathlib.Path(aiosb.sql.__file__).parent
    assert sorted(p.name for p in package.glob("*.lark")) == ["grammar.lark"]


def test_evaluation_never_parses(monkeypatch: pytest.MonkeyPatch):
    f = compile_filter("color = 'red' AND p('n') + 1 > 2 AND x LIKE 'a%'")
    a = compile_action("SET y = n * 2; REMOVE x")

    def no_parsing(*args: object, **kwargs: object) -> object:
        raise AssertionError("parsed while evaluating")

    monkeypatch.setattr(_parse, "parse", no_parsing)
    monkeypatch.setattr(_parse._parser(), "parse", no_parsing)
    v = view({"color": "red", "n": 2, "x": "abc"})
    assert f.matches(v)
    a.apply(v)
    assert v.properties == {"color": "red", "n": 2, "y": 4}


def test_matches_gives_a_bool():
    for text in ["1=1", "1=2", "missing = 1", "TRUE", "NULL"]:
        assert type(compile_filter(text).matches(view())) is bool


def test_constant_filters_do_not_read_the_message():
    for text, expected in [("1=1", True), ("1=2", False), ("1=1 OR x = 1", True),
                           ("1=2 AND x = 1", False), ("NOT (1 = 2)", True)]:
        assert compile_filter(text).matches(None) is expected  # type: ignore[arg-type]
