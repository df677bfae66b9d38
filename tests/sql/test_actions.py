"""SQL actions: SET and REMOVE on user and system properties."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest

from aiosb.errors import MessagingError
from aiosb.message import Message
from aiosb.sql import FilterEvaluationError, MessageView, compile_action

from ._helpers import view

T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def run(text: str, props: dict[str, object] | None = None, params=None, **system) -> MessageView:
    v = view(props, **system)
    compile_action(text, params).apply(v)
    return v


# Microsoft's examples ------------------------------------------------------------------


def test_set_a_constant():
    """SET source='routedOrders' (the SQL filter page's rule action)."""
    assert run("SET source='routedOrders'", {"source": "orders"}).properties == {
        "source": "routedOrders"
    }


def test_set_from_the_property_itself():
    """SET quantity = quantity / 2; (the topic filters page): Int64 division."""
    assert run("SET quantity = quantity / 2;", {"quantity": 10}).properties == {"quantity": 5}
    assert run("SET quantity = quantity / 2;", {"quantity": 5}).properties == {"quantity": 2}


def test_several_statements_with_and_without_semicolons():
    """SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';"""
    v = run(
        "SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
        {"color": "red", "quantity": 10, "priority": "high"},
        correlation_id="high",
    )
    assert v.properties == {"color": "red", "quantity": 5}
    assert v.system_changes == {"correlation_id": "low"}
    assert v.message.correlation_id == "high"  # the broker applies the changes to its copy


@pytest.mark.parametrize(
    "text",
    [
        "SET a = 1 SET b = 'two' REMOVE c",
        "SET a = 1;SET b = 'two';REMOVE c;",
        "set a=1;;; set b='two'\n\tremove c ;",
        "SET a = 1;\nSET b = 'two';\nREMOVE c",
    ],
)
def test_statement_separators(text: str):
    assert run(text, {"c": 3}).properties == {"a": 1, "b": "two"}


# User properties ---------------------------------------------------------------------------


def test_set_from_other_properties_and_parameters():
    v = run(
        "SET total = price * quantity + @fee; SET label = 'n' + quantity",
        {"price": 2.5, "quantity": 4},
        {"fee": 1},
    )
    assert v.properties["total"] == 11.0
    assert v.properties["label"] == "n4"


def test_statements_run_in_order_and_see_each_other():
    v = run("SET a = 1; SET b = a + 1; REMOVE a; SET c = a", {})
    assert v.properties == {"b": 2, "c": None}


def test_set_null_and_unknown_make_a_null_property():
    v = run("SET a = NULL; SET b = missing + 1", {})
    assert v.properties == {"a": None, "b": None}


def test_set_changes_a_property_of_another_case_in_place():
    v = run("SET Quantity = 7", {"quantity": 1})
    assert v.properties == {"quantity": 7}


def test_set_prefers_the_exact_name():
    v = run("SET Quantity = 7", {"quantity": 1, "Quantity": 2})
    assert v.properties == {"quantity": 1, "Quantity": 7}


def test_remove_ignores_case_and_missing_properties():
    assert run("REMOVE PRIORITY", {"priority": "x", "a": 1}).properties == {"a": 1}
    assert run("REMOVE nothing", {"a": 1}).properties == {"a": 1}


def test_bracketed_and_scoped_names():
    v = run("SET [a.b] = 1; SET user.[c-d] = 2; REMOVE user.e", {"e": 1})
    assert v.properties == {"a.b": 1, "c-d": 2}


def test_the_action_changes_the_view_dict_in_place():
    props: dict[str, object] = {"a": 1}
    message_view = MessageView(Message(b""), props)
    compile_action("SET a = 2").apply(message_view)
    assert props == {"a": 2}


# System properties ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("SET sys.Label = 'routed'", "subject", "routed"),
        ("SET sys.Subject = 'routed'", "subject", "routed"),
        ("SET sys.label = 'routed'", "subject", "routed"),
        ("SET sys.To = 'queue-b'", "to", "queue-b"),
        ("SET sys.ReplyTo = 'back'", "reply_to", "back"),
        ("SET sys.ReplyToSessionId = 'rs'", "reply_to_session_id", "rs"),
        ("SET sys.CorrelationId = NULL", "correlation_id", None),
        ("SET sys.MessageId = 'new-id'", "message_id", "new-id"),
        ("SET sys.SessionId = 's2'", "session_id", "s2"),
        ("SET sys.PartitionKey = 'k'", "partition_key", "k"),
        ("SET sys.ContentType = 'text/plain'", "content_type", "text/plain"),
        ("SET sys.TimeToLive = @ttl", "time_to_live", dt.timedelta(minutes=1)),
        ("SET sys.ScheduledEnqueueTimeUtc = @at", "scheduled_enqueue_time", T0),
        ("SET sys.ScheduledEnqueueTime = @naive", "scheduled_enqueue_time", T0),
    ],
)
def test_set_a_system_property(text: str, field: str, value: object):
    params = {"ttl": dt.timedelta(minutes=1), "at": T0, "naive": T0.replace(tzinfo=None)}
    v = run(text, {"keep": 1}, params, correlation_id="c")
    assert v.system_changes == {field: value}
    assert v.properties == {"keep": 1}


def test_set_system_from_other_properties_and_read_it_back():
    v = run(
        "SET sys.To = sys.ReplyTo + '/' + region; SET seen = sys.To; SET sys.Label = seen",
        {"region": "eu"},
        reply_to="orders",
    )
    assert v.system_changes == {"to": "orders/eu", "subject": "orders/eu"}
    assert v.properties["seen"] == "orders/eu"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("SET sys.To = 5", "sys.To takes a string, not a number"),
        ("SET sys.Label = TRUE", "sys.Label takes a string, not a boolean"),
        ("SET sys.MessageId = NULL", "sys.MessageId cannot be set to NULL"),
        ("SET sys.MessageId = ''", "1 to 128 characters"),
        ("SET sys.SessionId = @long", "1 to 128 characters"),
        ("SET sys.ContentType = 'caf\u00e9'", "printable ASCII"),
        ("SET sys.TimeToLive = 5", "sys.TimeToLive takes a time span"),
        ("SET sys.TimeToLive = @negative", "must be positive"),
        ("SET sys.ScheduledEnqueueTimeUtc = 'tomorrow'", "takes a date and time"),
        ("SET a = 1 / 0", "divided by zero"),
        ("SET a = 'x' - 1", "- does not apply to a string and a number"),
        ("SET a = -'x'", "unary - does not apply to a string"),
        ("SET a = 1; SET b = sys.SequenceNumber + 'x' * 2", "does not apply"),
    ],
)
def test_evaluation_errors(text: str, words: str):
    action = compile_action(text, {"long": "x" * 129, "negative": dt.timedelta(-1)})
    with pytest.raises(FilterEvaluationError, match=words):
        action.apply(view({}))


def test_text_and_parameters_are_kept():
    action = compile_action("SET a = @p", {"p": 1})
    assert action.text == "SET a = @p"
    assert action.parameters == {"p": 1}
    assert "SET a = @p" in repr(action)


def test_the_evaluation_error_is_a_messaging_error_that_pickles():
    error = FilterEvaluationError("cannot compare a string with a number.")
    assert isinstance(error, MessagingError)
    assert not error.retryable
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is FilterEvaluationError
    assert copy.message == error.message
