"""get-message-sessions over serve_amqp's ``$management`` nodes, through the official
Python SDK (its public list_queue_sessions, and its management call with a skip and top
of our choosing), and the rule descriptions of add-rule and enumerate-rules through the
AMQP codec (#15). The JS rule manager drives the rule operations end to end in
tests/test_js_client.py."""

from __future__ import annotations

import asyncio
import datetime as _dt
from typing import Any

import pytest
from azure.servicebus.aio import ServiceBusClient

from aiosb import emulator
from aiosb.errors import InvalidArgument
from aiosb.message import Message
from aiosb.protocol import ManagementRequest, SessionRequest
from aiosb.rules import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    RuleProperties,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from aiosb.server.amqp import _rule_descriptions as _rules
from aiosb.server.amqp.codec import Described, Symbol, decode, encode

from .conftest import NAMESPACE

pytestmark = pytest.mark.timeout(60)
_OPERATION = b"com.microsoft:get-message-sessions"


async def _with_state(sid: str, state: bytes) -> None:
    ns = emulator.namespace(NAMESPACE)
    info = await ns.session("sq", SessionRequest("accept", sid, max_wait=0))
    await ns.session("sq", SessionRequest("set_state", sid, info.lock, state))
    await ns.session("sq", SessionRequest("release", sid, info.lock))


async def test_the_sdk_lists_the_sessions_with_messages_or_state_over_pages(server):
    """list_queue_sessions (azure-servicebus 7.15) asks for pages of 100 with .NET's
    DateTime.MaxValue as the time, which means: sessions with messages or state."""
    ns = emulator.namespace(NAMESPACE)
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        assert [s async for s in client.list_queue_sessions("sq")] == []  # 204
        ids = [f"s{i:03}" for i in range(150)]
        await ns.send("sq", [Message(b"x", session_id=sid) for sid in ids])
        await _with_state("only-state", b"kept")
        later = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
        await ns.schedule("sq", [Message(b"later", session_id="only-scheduled",
                                         scheduled_enqueue_time=later)])
        await ns.session("sq", SessionRequest("accept", "locked-empty", max_wait=0))
        listed = [s async for s in client.list_queue_sessions("sq")]
    assert listed == sorted([*ids, "only-state"])  # two pages: 100, then 51


async def test_sessions_whose_state_was_set_after_a_time(server):
    ns = emulator.namespace(NAMESPACE)
    await ns.send("sq", [Message(b"x", session_id="messages-only")])
    await _with_state("before", b"1")
    await asyncio.sleep(0.01)
    mark = _dt.datetime.now(_dt.UTC)
    await asyncio.sleep(0.01)
    await _with_state("after", b"2")
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        got = [s async for s in client.list_queue_sessions("sq", state_updated_after=mark)]
    assert got == ["after"]


def _page(status: int, message: Any, description: Any, amqp_transport: Any) -> Any:
    if status != 200:
        return status, None
    body = amqp_transport.get_message_value(message)
    return status, (body[b"skip"], [s.decode() for s in body[b"sessions-ids"]])


async def test_skip_and_top_page_the_session_ids_and_an_empty_page_is_204(server):
    ns = emulator.namespace(NAMESPACE)
    await ns.send("sq", [Message(b"x", session_id=sid) for sid in "edcba"])
    async with ServiceBusClient.from_connection_string(server.connection_string()) as client:
        browser = client._create_session_browser("sq")
        amqp = browser._amqp_transport

        async def ask(skip: int, top: int) -> Any:
            body = {"last-updated-time": amqp.AMQP_TIMESTAMP_VALUE(253402300800000),
                    "skip": amqp.AMQP_INT_VALUE(skip), "top": amqp.AMQP_INT_VALUE(top)}
            return await browser._mgmt_request_response_with_retry(
                _OPERATION, body, _page, keep_alive_associated_link=False)

        assert await ask(0, 2) == (200, (2, ["a", "b"]))
        assert await ask(1, 3) == (200, (4, ["b", "c", "d"]))
        assert await ask(4, 10) == (200, (5, ["e"]))
        assert await ask(5, 10) == (204, None)
        await browser.close()


async def test_the_aiosb_amqp_transport_lists_sessions_through_the_sdk(server):
    from aiosb.transport.amqp import AmqpTransport

    ns = emulator.namespace(NAMESPACE)
    await ns.send("sq", [Message(b"x", session_id=sid) for sid in ("b", "a")])
    transport = AmqpTransport.from_url(server.connection_string())
    await transport.open()
    try:
        got = await transport.manage(ManagementRequest("sessions", None, "sq"))
    finally:
        await transport.aclose()
    assert got == ["a", "b"]


# -- rule descriptions through the codec -------------------------------------------------


def _through_the_wire(value: Any) -> Any:
    got, _ = decode(encode(value))
    return got


@pytest.mark.parametrize("description, rule", [
    ({"sql-filter": {"expression": "qty > @min", "parameters": {"@min": 3}}},
     RuleProperties("big", SqlRuleFilter("qty > @min", {"@min": 3}))),  # names as given
    ({"sql-filter": {"expression": "1=1"},
      "sql-rule-action": {"expression": "SET sys.Label = 'x'"}},
     RuleProperties("big", SqlRuleFilter("1=1"), SqlRuleAction("SET sys.Label = 'x'"))),
    # As @azure/service-bus sends one: every field, unset ones null.
    ({"correlation-filter": {"correlation-id": None, "message-id": None, "to": None,
                             "reply-to": None, "label": "eu", "session-id": None,
                             "reply-to-session-id": None, "content-type": "text/plain",
                             "properties": {"region": "eu", "wait": Described(
                                 Symbol("com.microsoft:timespan"), 20_000_000)}}},
     RuleProperties("big", CorrelationRuleFilter(
         label="eu", content_type="text/plain",
         properties={"region": "eu", "wait": _dt.timedelta(seconds=2)}))),
])
def test_an_add_rule_description_becomes_the_rule(description, rule):
    assert _rules.rule_of("big", _through_the_wire(description)) == rule


@pytest.mark.parametrize("description", [
    {},  # no filter
    {"sql-filter": {"expression": "a=1"}, "correlation-filter": {"label": "x"}},
    {"correlation-filter": {"label": None}},  # names nothing
    {"sql-filter": "a=1"},
    {"sql-filter": {"expression": "a=1"}, "sql-rule-action": ["SET a=2"]},
])
def test_a_malformed_rule_description_is_refused(description):
    with pytest.raises(InvalidArgument):
        _rules.rule_of("r", _through_the_wire(description))


_WHEN = _dt.datetime(2024, 5, 1, 12, 0, tzinfo=_dt.UTC)


@pytest.mark.parametrize("rule, filter_part, action_part", [
    (RuleProperties("$Default", TrueRuleFilter(), None, _WHEN),
     (0x1370000007, ["1=1", 20]), (0x13700000005, [])),
    (RuleProperties("none", FalseRuleFilter(), None, _WHEN),
     (0x1370000008, ["1=0", 20]), (0x13700000005, [])),
    (RuleProperties("sql", SqlRuleFilter("a = 1"), SqlRuleAction("SET b = 2"), _WHEN),
     (0x1370000006, ["a = 1", 20]), (0x13700000006, ["SET b = 2", 20])),
    (RuleProperties("corr", CorrelationRuleFilter(correlation_id="c", label="eu",
                                                  properties={"n": 5}), None, _WHEN),
     (0x1370000009, ["c", None, None, None, "eu", None, None, None, {"n": 5}]),
     (0x13700000005, [])),
])
def test_an_enumerated_rule_is_the_described_list_the_sdks_read(rule, filter_part,
                                                                  action_part):
    """The descriptor codes of azure-sdk-for-js's descriptorCodes (filters 0x13_7000000N,
    rule and actions 0x137_0000000N) and the field order its getRules reads."""
    got = _through_the_wire(_rules.describe(rule))
    assert got.descriptor == 0x13700000004
    parts_filter, parts_action, name, created = got.value
    assert (parts_filter.descriptor, parts_filter.value) == filter_part
    assert (parts_action.descriptor, parts_action.value) == action_part
    assert (name, created) == (rule.name, _WHEN)
