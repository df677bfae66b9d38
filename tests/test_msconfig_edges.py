"""Issue 48, item 5: a careless or hostile ``Config.json`` (``aiosb serve --config``)
stops the server with one sentence naming the file, the JSON path and the field, and
creates nothing: no traceback (an overflowing duration, deep nesting, huge numbers), no
name given twice under another case (Service Bus compares names without case), and a
file applies whole or not at all (checked against the namespace before anything is made,
so nothing reaches ``--data-dir`` either).
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from test_msconfig import EVERY_KEY, write

import aiosb
from aiosb import emulator
from aiosb.errors import InvalidArgument
from aiosb.rules import SqlRuleFilter
from aiosb.server import msconfig
from aiosb.server.http import serve
from aiosb.server.msconfig import _reader as reader

pytestmark = pytest.mark.timeout(120)

NS = "UserConfig.Namespaces[0]"
Q0 = f"{NS}.Queues[0].Properties"
SUB0 = f"{NS}.Topics[0].Subscriptions[0]"


#: EVERY_KEY with nothing to warn of (its topic's 5-second window is raised, and said).
QUIET = copy.deepcopy(EVERY_KEY)
QUIET["UserConfig"]["Namespaces"][0]["Topics"][0]["Properties"][
    "DuplicateDetectionHistoryTimeWindow"] = "PT20S"


def changed(change: Any) -> Any:
    data = copy.deepcopy(QUIET)
    change(data["UserConfig"]["Namespaces"][0])
    return data


def one_sentence(text: str) -> bool:
    return "\n" not in text and text.rstrip().endswith((".", "?")) and len(text) < 600


def refused(path: Path) -> str:
    with pytest.raises(msconfig.ConfigError) as caught:
        msconfig.load(path)
    said = str(caught.value)
    assert one_sentence(said), said
    return said


# -- what the reader refuses, in a sentence, where it used to crash or merge ----------


def _set(where: str, value: Any) -> Any:
    """A change that sets the queue orders' property ``where`` to ``value``."""
    return lambda ns: ns["Queues"][0]["Properties"].update({where: value})


RULE1 = f"{NS}.Topics[0].Subscriptions[1].Rules[0].Properties"
RULE2 = f"{NS}.Topics[0].Subscriptions[2].Rules[0].Properties"


def _rule(sub: int, where: str, value: Any) -> Any:
    """A change that sets ``where`` of subscription ``sub``'s first rule to ``value``."""
    return lambda ns: ns["Topics"][0]["Subscriptions"][sub]["Rules"][0]["Properties"].update(
        {where: value})


@pytest.mark.parametrize(("change", "said"), [
    (_set("LockDuration", "P99999999999D"), f'{Q0}.LockDuration: "P99999999999D" is longer '
     "than the longest duration Service Bus knows"),
    (_set("DefaultMessageTimeToLive", "PT" + "9" * 5000 + "H"),
     f"{Q0}.DefaultMessageTimeToLive: "),
    (_set("DefaultMessageTimeToLive", "P10675199DT2H48M6S"),
     f"{Q0}.DefaultMessageTimeToLive: "),
    (_set("DuplicateDetectionHistoryTimeWindow", "P99999999999W"),
     f"{Q0}.DuplicateDetectionHistoryTimeWindow: "),
    (_set("MaxDeliveryCount", 2**31), f"{Q0}.MaxDeliveryCount: 2147483648 is not a whole "
     "number from 1 to 2147483647"),
    (lambda ns: ns["Topics"][0]["Subscriptions"].append({"Name": "BY-SQL"}),
     f"{NS}.Topics[0].Subscriptions[4].Name: 'BY-SQL' is given twice (first at "
     f"{NS}.Topics[0].Subscriptions[2].Name)"),
    (lambda ns: ns["Topics"].append({"Name": "Orders"}),
     f"{NS}.Topics[1].Name: 'Orders' is given twice (first at {NS}.Queues[0].Name)"),
    (lambda ns: ns["Topics"].append({"Name": "EVENTS.v1"}),
     f"{NS}.Topics[1].Name: 'EVENTS.v1' is given twice"),
    (lambda ns: ns["Topics"][0]["Subscriptions"][2]["Rules"].append(
        {"Name": "BIG", "Properties": {"FilterType": "Sql", "SqlFilter": {
            "SqlExpression": "1=1"}}}),
     f"{NS}.Topics[0].Subscriptions[2].Rules[1].Name: 'BIG' is given twice"),
    (lambda ns: ns["Topics"][0]["Subscriptions"][0].update(Name="a/b"),
     f"{SUB0}.Name: subscription name 'a/b' is not valid"),
    (lambda ns: ns["Topics"][0]["Subscriptions"][0].update(Name="s" * 51),
     f"{SUB0}.Name: subscription name"),
    (lambda ns: ns["Queues"][0].update(Name="a/subscriptions/b"),
     f"{NS}.Queues[0].Name: queue name 'a/subscriptions/b' contains the reserved segment"),
    (_set("ForwardTo", "events.v1/subscriptions/by-sql"), f"{Q0}.ForwardTo: "),
    (lambda ns: ns["Topics"][0]["Subscriptions"][1]["Rules"][0]["Properties"][
        "CorrelationFilter"]["Properties"].update(big=10**30),
     f"{NS}.Topics[0].Subscriptions[1].Rules[0].Properties.CorrelationFilter.Properties.big:"),
    (_rule(2, "SqlFilter", {"SqlExpression": "a = '" + "x" * 1019 + "'"}),
     f"{RULE2}.SqlFilter.SqlExpression: the SQL filter is 1025 characters; at most 1024"),
    (_rule(2, "Action", {"SqlExpression": "SET a = '" + "x" * 1015 + "'"}),
     f"{RULE2}.Action.SqlExpression: the SQL action is 1025 characters; at most 1024"),
    (_rule(1, "CorrelationFilter", {"Properties": {f"p{i}": i for i in range(65)}}),
     f"{RULE1}.CorrelationFilter: a correlation filter takes at most 64 parameters"),
    (_rule(1, "CorrelationFilter", {"Properties": {"": 1}}),
     f"{RULE1}.CorrelationFilter: a correlation filter parameter name must be text"),
    (_rule(1, "CorrelationFilter", {"Properties": {"p": 1, "@p": 2}}),
     f"{RULE1}.CorrelationFilter: the correlation filter names parameter '@p' twice"),
    (lambda ns: ns.update(Name="a/b"), f"{NS}.Name: namespace name 'a/b' is not valid"),
    (lambda ns: ns.update(Name="a" * 300), f"{NS}.Name: namespace name 'aaaa"),
    (lambda ns: ns.update(Name="9lives"), f"{NS}.Name: namespace name '9lives' is not valid"),
], ids=["overflow", "digits", "past-max", "weeks", "count-32-bits", "subscription-case",
        "queue-and-topic", "topic-case", "rule-case", "subscription-slash",
        "subscription-long", "reserved", "forward-to-subscription", "property-64-bits",
        "sql-1025", "action-1025", "properties-65", "property-named-empty",
        "property-twice", "namespace-slash", "namespace-300", "namespace-digit-first"])
def test_a_bad_value_is_one_sentence_naming_its_path(tmp_path, change, said):
    """Each used to end in a traceback, be merged silently, or pass the reader and fail
    half-way while applying; now the reader refuses it, naming the path and the field.
    The last eight (review of #48) escaped as a bare InvalidArgument of aiosb's own
    constructors (SQL over 1024 characters, correlation properties past 64, named ``""``
    or twice) or passed the schema's pattern and were refused by the emulator later
    (the namespace name), naming neither file nor path."""
    assert said in refused(write(tmp_path, changed(change)))


@pytest.mark.parametrize(("change", "said"), [
    (_set("LockDuration", "PT0.0000001S"), f'{Q0}.LockDuration: "PT0.0000001S" is no time'),
    (_set("MaxDeliveryCount", -3), f"{Q0}.MaxDeliveryCount: -3 is not a whole number"),
    (_set("MaxDeliveryCount", 3.0), f"{Q0}.MaxDeliveryCount: 3.0 is not a whole number"),
    (_set("MaxDeliveryCount", True), f"{Q0}.MaxDeliveryCount: true is not a whole number"),
    (_set("RequiresSession", "true"), f'{Q0}.RequiresSession: "true" is not true or false'),
    (lambda ns: ns["Queues"][0].update(Name="caf\u00e9"), f"{NS}.Queues[0].Name: "),
    (lambda ns: ns["Queues"][0].update(Properties=[]),
     f"{NS}.Queues[0].Properties: must be a JSON object, not an array"),
    (lambda ns: ns["Topics"][0]["Subscriptions"][0].update(Rules="all"),
     f"{SUB0}.Rules: must be a JSON array, not a string"),
    (lambda ns: ns.clear(), f"{NS}: has no 'Name'"),
], ids=["rounds-to-zero", "count-negative", "count-float", "count-bool", "bool-string",
        "not-ascii", "properties-array", "rules-string", "empty-namespace"])
def test_values_of_the_wrong_kind_keep_their_sentence(tmp_path, change, said):
    """What the reader refused before the rewrite it still refuses, in the same words:
    negative and fractional counts, booleans as strings, the wrong JSON type."""
    assert said in refused(write(tmp_path, changed(change)))


@pytest.mark.parametrize(("text", "said"), [
    ("[" * 100_000 + "]" * 100_000, "nests objects and arrays 100000 deep"),
    ('{"UserConfig": ' * 70 + "1" + "}" * 70, "nests objects and arrays 70 deep"),
    ('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q", '
     '"Properties": {"MaxDeliveryCount": ' + "9" * 5000 + "}}]}]}}",
     f"{NS}.Queues[0].Properties.MaxDeliveryCount: 99999999999999999999... (5000 characters)"),
    ('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q", '
     '"Properties": {"MaxDeliveryCount": 1e999}}]}]}}',
     f"{NS}.Queues[0].Properties.MaxDeliveryCount: 1e999 is not a whole number"),
    ('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q", '
     '"Properties": {"MaxDeliveryCount": NaN}}]}]}}', "NaN is not a JSON number"),
], ids=["brackets", "objects", "huge-integer", "huge-float", "nan"])
def test_the_file_itself_is_bounded(tmp_path, text, said):
    """Nesting (Python's JSON reader recurses: RecursionError), numbers too long for
    Python to read (ValueError) or infinite, and what is not JSON at all."""
    path = tmp_path / "Config.json"
    path.write_text(text)
    assert said in refused(path)


def test_only_aiosbs_own_refusals_become_a_sentence_and_a_bug_stays_visible(monkeypatch):
    """Review of #48: an InvalidArgument of aiosb's own constructors, wherever the
    reader meets it, is the ConfigError at the path of what it was reading (the rule's
    filter; past every part, the file); any other exception is a bug of the reader and
    escapes as itself, never dressed as a sentence about the user's file."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise InvalidArgument("refused.")

    monkeypatch.setattr(reader, "CorrelationRuleFilter", refuse)
    with pytest.raises(msconfig.ConfigError) as caught:
        msconfig.parse(copy.deepcopy(QUIET))
    assert str(caught.value) == f"{NS}.Topics[0].Subscriptions[0].Rules[0].Properties." \
        "CorrelationFilter: refused."
    monkeypatch.undo()
    monkeypatch.setattr(reader, "EmulatorConfig", refuse)  # outside every part: the net
    with pytest.raises(msconfig.ConfigError, match=r"^the file: refused\.$"):
        msconfig.parse(copy.deepcopy(QUIET))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("a bug of the reader")

    monkeypatch.setattr(reader, "CorrelationRuleFilter", broken)
    with pytest.raises(TypeError, match="a bug of the reader"):
        msconfig.parse(copy.deepcopy(QUIET))


def test_the_file_is_utf8_with_or_without_a_byte_order_mark(tmp_path):
    """A byte order mark (Windows editors write one) is skipped; a byte that is not
    UTF-8 is one sentence saying where."""
    path = tmp_path / "Config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(QUIET).encode())
    assert len(msconfig.load(path).entities) == 8
    path.write_bytes(b'{"UserConfig": {"Namespaces": [{"Name": "caf\xe9"}]}}')
    assert refused(path) == "is not UTF-8 text (byte 44)."


def test_a_file_larger_than_a_config_holds_is_refused_unread(tmp_path):
    """A valid file of more than :data:`msconfig.MAX_BYTES` (here 17 MiB of queues): the
    reader stops there, not after the whole (its comments and JSON) was worked through."""
    queues = ",".join(f'{{"Name": "q{i}"}}' for i in range(1_100_000))
    path = tmp_path / "Config.json"
    path.write_text('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": ['
                    + queues + "]}]}}")
    assert path.stat().st_size > 16 * 1024 * 1024
    assert "is larger than 16 MiB" in refused(path)


# -- whole or not at all: checked against the namespace before anything is made ---------


async def snapshot(ns: aiosb.Namespace) -> dict[str, Any]:
    """Every entity and rule the namespace holds, with every property but when it was
    last used and updated (a restart from --data-dir sets both to its own time)."""
    held: dict[str, Any] = {}

    def kept(props: Any) -> Any:
        return replace(props, accessed_at_utc=None, updated_at_utc=None)

    for queue in await ns.list_queues():
        held[f"queue {queue.name}"] = kept(queue)
    for topic in await ns.list_topics():
        held[f"topic {topic.name}"] = kept(topic)
        for sub in await ns.list_subscriptions(topic.name):
            held[f"subscription {topic.name}/{sub.name}"] = kept(sub)
            held[f"rules {topic.name}/{sub.name}"] = [
                (r.name, r.filter, r.action) for r in await ns.list_rules(topic.name, sub.name)]
    return held


async def _refused_whole(config: msconfig.EmulatorConfig, before: Any = None) -> str:
    """Apply ``config`` to the namespace (after ``before`` made its state): the
    sentence it is refused with; the namespace as it was."""
    async with aiosb.connect("memory://sbemulatorns") as ns:
        if before is not None:
            await before(ns)
        held = await snapshot(ns)
        with pytest.raises(msconfig.ConfigError) as caught:
            await msconfig.apply(ns, config)
        assert await snapshot(ns) == held
    said = str(caught.value)
    assert one_sentence(said), said
    return said


async def test_a_forward_to_no_entity_creates_nothing(tmp_path):
    """The forwarding is set once every entity exists; a target that never will used to
    fail there, after every entity of the file was made."""
    data = changed(lambda ns: ns["Queues"].append({"Name": "last", "Properties": {
        "ForwardTo": "nowhere"}}))
    said = await _refused_whole(msconfig.load(write(tmp_path, data)))
    assert said.startswith(f"{NS}.Queues[3].Properties.ForwardTo: 'nowhere' is neither a "
                           "queue nor a topic")


async def test_a_name_the_namespace_holds_as_another_kind_creates_nothing(tmp_path):
    """A queue of the file named as a topic the namespace (its --data-dir) holds."""
    data = changed(lambda ns: ns["Queues"].append({"Name": "Kept"}))

    async def before(ns: aiosb.Namespace) -> None:
        await ns.create_topic("kept")

    said = await _refused_whole(msconfig.load(write(tmp_path, data)), before)
    assert said.startswith(f"{NS}.Queues[3].Name: the namespace has a topic named 'kept'")


async def test_a_fixed_property_changed_on_a_later_entity_creates_nothing(tmp_path):
    """``RequiresSession`` differs on an entity that exists, listed after ones to make:
    those used to be made before the sentence."""
    async def before(ns: aiosb.Namespace) -> None:
        await ns.create_topic("events.v1", requires_duplicate_detection=True)
        await ns.create_subscription("events.v1", "by-sql", requires_session=True)

    said = await _refused_whole(msconfig.load(write(tmp_path, EVERY_KEY)), before)
    assert said.startswith(f"{NS}.Topics[0].Subscriptions[2].Properties: the file sets "
                           "requires_session to False")
    assert "fixes at creation" in said


def _sql_rules(count: int) -> list[dict[str, Any]]:
    return [{"Name": f"r{i}", "Properties": {"FilterType": "Sql",
                                             "SqlFilter": {"SqlExpression": "1=1"}}}
            for i in range(count)]


async def test_a_topic_over_its_sql_filter_quota_creates_nothing(tmp_path):
    """The topic's subscriptions the file does not list keep their SQL filters: with the
    file's, 2,002, over the quota, which used to stop the file at the 2,001st rule with
    every entity and rule before it made."""
    data = changed(lambda ns: ns["Topics"][0]["Subscriptions"].append(
        {"Name": "many", "Rules": _sql_rules(1001)}))

    async def before(ns: aiosb.Namespace) -> None:
        await ns.create_topic("events.v1", requires_duplicate_detection=True,
                              default_message_time_to_live=timedelta(minutes=10))
        await ns.create_subscription("events.v1", "kept")
        for i in range(1000):
            await ns.create_rule("events.v1", "kept", f"k{i}", filter=SqlRuleFilter("1=1"))

    said = await _refused_whole(msconfig.load(write(tmp_path, data)), before)
    assert said.startswith(f"{NS}.Topics[0].Subscriptions: the topic's subscriptions would "
                           "have 2002 SqlRuleFilters, more than the 2000")


def test_a_file_over_a_quota_by_itself_is_refused_as_it_is_read(tmp_path):
    """More queues and topics than a namespace holds, more SQL filters than a topic
    has: refused before the rest is read (the SQL compiled), naming where."""
    data = changed(lambda ns: ns["Topics"][0]["Subscriptions"].extend(
        [{"Name": "many-1", "Rules": _sql_rules(1000)},
         {"Name": "many-2", "Rules": _sql_rules(1000)}]))
    assert refused(write(tmp_path, data)).startswith(
        f"{NS}.Topics[0].Subscriptions[5].Rules[999]: is SqlRuleFilter number 2001 of the "
        "topic, more than the 2000 a topic may have")
    many = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": f"q{i}"} for i in range(10_001)]}]}}
    assert refused(write(tmp_path, many)).startswith(
        f"{NS}: has 10001 queues and topics, more than the 10000 a namespace may hold")


async def test_rules_are_removed_before_any_is_added(tmp_path):
    """A file that moves SQL filters from one subscription to another within the quota
    applies (the old order, adding before removing, passed the quota on the way)."""
    def sql(count: int, start: int = 0) -> list[dict[str, Any]]:
        return [{"Name": f"r{i}", "Properties": {"FilterType": "Sql", "SqlFilter": {
            "SqlExpression": "1=1"}}} for i in range(start, start + count)]

    base = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Topics": [{
        "Name": "t", "Subscriptions": [{"Name": "a", "Rules": sql(1)},
                                       {"Name": "b", "Rules": sql(1999, 1)}]}]}]}}
    moved = copy.deepcopy(base)
    moved["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"] = [
        {"Name": "a", "Rules": sql(1999)}, {"Name": "b", "Rules": sql(1, 5000)}]
    async with aiosb.connect("memory://sbemulatorns") as ns:
        await msconfig.apply(ns, msconfig.load(write(tmp_path, base)))
        await msconfig.apply(ns, msconfig.load(write(tmp_path, moved)))
        assert len(await ns.list_rules("t", "a")) == 1999
        assert [r.filter for r in await ns.list_rules("t", "b")] == [SqlRuleFilter("1=1")]


# -- any file at all: a plan or one sentence, and nothing made on a sentence -------------

#: Values a careless or hostile file puts anywhere.
NASTY = st.one_of(
    st.sampled_from([
        "P99999999999D", "PT" + "9" * 30 + "H", "P10675199DT2H48M5.4775807S",
        "P10675199DT2H48M5.4775808S", "PT0.0000001S", "PT1H", "PT5M", "PT10S", "P1Y", "",
        "orders", "ORDERS", "Graveyard", "events.v1", "EVENTS.V1", "by-sql", "BY-SQL",
        "a/subscriptions/b", "x" * 300, "caf\u00e9", "$Default", "Correlation", "Sql",
        "qty >", "sys.Label = 'x'", "__BIG__", "__DEEP__", "File", "sbemulatorns",
    ]),
    st.from_regex(r"\AP(\d{1,25}D)?(T(\d{1,25}H)?(\d{1,25}M)?(\d{1,25}(\.\d{1,12})?S)?)?\Z"),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["Name", "Properties", "x", "Rules"]), st.integers(),
                    max_size=2),
)


_SQL_EDGE = st.builds(lambda head, n: head + "x" * n + "'",
                      st.sampled_from(["a = '", "SET a = '"]), st.integers(1005, 1030))
_CORRELATION_EDGE = st.builds(lambda properties: {"Properties": properties}, st.one_of(
    st.dictionaries(st.text(max_size=4), st.integers(0, 9), min_size=60, max_size=70),
    st.sampled_from([{"": 1}, {"p": 1, "@p": 2}, {"region": "eu", "": "x"}]),
))
_RULE = ("UserConfig", "Namespaces", 0, "Topics", 0, "Subscriptions")
#: Values at the edges of aiosb's own limits, by their place in EVERY_KEY (review of
#: #48): a SQL expression (a filter's or an action's) around 1024 characters, a
#: correlation filter of more than 64 properties or with one named ``""`` or twice
#: (``p`` and ``@p``), and namespace names the schema's pattern takes but the emulator
#: refuses. Each escaped the reader as a bare InvalidArgument, or reached the emulator,
#: and the generator without them never drew one: the property held on that reader.
EDGES: list[tuple[tuple[str | int, ...], st.SearchStrategy[Any]]] = [
    (("UserConfig", "Namespaces", 0, "Name"), st.sampled_from(
        ["a/b", "a.b", "a_b", "9lives", "x-y", "a" * 50, "a" * 51, "a" * 300])),
    ((*_RULE, 2, "Rules", 0, "Properties", "SqlFilter", "SqlExpression"), _SQL_EDGE),
    ((*_RULE, 2, "Rules", 0, "Properties", "Action", "SqlExpression"), _SQL_EDGE),
    ((*_RULE, 0, "Rules", 0, "Properties", "CorrelationFilter"), _CORRELATION_EDGE),
    ((*_RULE, 1, "Rules", 0, "Properties", "CorrelationFilter"), _CORRELATION_EDGE),
]


def _places(value: Any, holder: Any, key: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of the document, the root's holder first."""
    found = [(holder, key)]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _places(v, value, k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _places(v, value, i)
    return found


@st.composite
def config_files(draw: st.DrawFn) -> bytes:
    """EVERY_KEY, its values replaced, keys dropped, entries repeated under another case,
    then its bytes damaged: a byte order mark, deep nesting, a huge number, a cut, a
    byte that is not UTF-8. Half the files first get a value at the edge of aiosb's own
    limits (:data:`EDGES`)."""
    holder = {"root": copy.deepcopy(EVERY_KEY)}
    edge = draw(st.sampled_from([None] * len(EDGES) + EDGES))
    if edge is not None:
        path, values = edge
        container = holder["root"]
        for step in path[:-1]:
            container = container[step]
        container[path[-1]] = draw(values)
    for _ in range(draw(st.integers(0 if edge else 1, 3))):
        container, key = draw(st.sampled_from(_places(holder["root"], holder, "root")))
        if key not in container if isinstance(container, dict) else key >= len(container):
            continue  # a place an earlier change removed
        operation = draw(st.sampled_from(["replace", "drop", "twin", "twin"]))
        item = container[key]
        if operation == "replace" or container is holder:
            container[key] = draw(NASTY)
        elif operation == "drop":
            del container[key]
        elif isinstance(container, list) and isinstance(item, dict) and isinstance(
                item.get("Name"), str):
            twin = copy.deepcopy(item)
            twin["Name"] = draw(st.sampled_from([item["Name"].upper(), item["Name"].swapcase(),
                                                 item["Name"]]))
            container.append(twin)
    text = json.dumps(holder["root"], allow_nan=True)
    text = text.replace('"__BIG__"', "9" * 5000).replace('"__DEEP__"', "[" * 50_000)
    raw = text.encode()
    damage = draw(st.sampled_from(["none", "none", "bom", "cut", "latin-1", "deep"]))
    if damage == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif damage == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif damage == "latin-1":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\xe9" + raw[at:]
    elif damage == "deep":
        depth = draw(st.sampled_from([10, 60, 70, 100_000]))
        raw = b"[" * depth + raw + b"]" * depth
    return raw


#: Hypothesis's phases but its explanation, which traces every line of a failing run:
#: with these files it takes minutes, and the test would end in its timeout instead of
#: the failing file.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]


#: What the namespace holds before the file: nothing; a topic named as a queue of the
#: file; the file applied once (so the mutated one updates it); an entity that fixes
#: RequiresSession otherwise.
async def _nothing(ns: aiosb.Namespace) -> None:
    return None


async def _topic_orders(ns: aiosb.Namespace) -> None:
    await ns.create_topic("Orders")


async def _applied(ns: aiosb.Namespace) -> None:
    await msconfig.apply(ns, msconfig.parse(copy.deepcopy(EVERY_KEY)))


async def _sessions_differ(ns: aiosb.Namespace) -> None:
    await ns.create_queue("graveyard", requires_session=True, lock_duration=timedelta(
        seconds=10))


BEFORE = [_nothing, _topic_orders, _applied, _sessions_differ]


def _read(path: Path) -> msconfig.EmulatorConfig | None:
    """The file read, or None when it is refused in one sentence (no other exception)."""
    try:
        return msconfig.load(path)
    except msconfig.ConfigError as exc:
        assert one_sentence(str(exc)), str(exc)
        event("refused by the reader")
        return None


@settings(max_examples=500, deadline=None, database=None, derandomize=True, phases=PHASES,
          suppress_health_check=list(HealthCheck))
@given(raw=config_files(), before=st.sampled_from(BEFORE))
@example(raw=json.dumps(changed(_set("LockDuration", "P99999999999D"))).encode(),
         before=_nothing)
@example(raw=b"[" * 100_000, before=_nothing)
@example(raw=json.dumps(changed(lambda ns: ns["Topics"][0]["Subscriptions"].append(
    {"Name": "EVERYTHING"}))).encode(), before=_nothing)
@example(raw=json.dumps(changed(lambda ns: ns["Queues"].append({"Name": "z", "Properties": {
    "ForwardTo": "nowhere"}}))).encode(), before=_nothing)
@example(raw=json.dumps(changed(_rule(2, "SqlFilter", {"SqlExpression": "a = '" + "x" * 2000
                                                       + "'"}))).encode(), before=_nothing)
@example(raw=json.dumps(changed(_rule(1, "CorrelationFilter", {"Properties": {"": 1}}))
                        ).encode(), before=_nothing)
@example(raw=json.dumps(changed(lambda ns: ns.update(Name="a/b"))).encode(), before=_nothing)
def test_any_file_gives_a_plan_or_one_sentence_and_a_sentence_makes_nothing(
        tmp_path_factory, raw, before):
    """Property: whatever the bytes, the reader returns a config or raises
    :class:`msconfig.ConfigError` in one sentence, never another exception; a config
    either applies or is refused in one sentence with the namespace as it was; and once
    applied, applying it again changes nothing (0 created, 0 updated). The namespace is
    the file's own, made as the server makes it: a name the reader passed is one the
    emulator takes."""
    path = tmp_path_factory.mktemp("any") / "Config.json"
    path.write_bytes(raw)
    config = _read(path)
    if config is None:
        return

    async def main() -> None:
        emulator.reset()
        emulator.namespace(config.namespace)  # raises on a name the reader let through
        async with aiosb.connect(f"memory://{config.namespace}") as ns:
            await before(ns)
            held = await snapshot(ns)
            try:
                await msconfig.apply(ns, config)
            except msconfig.ConfigError as exc:
                assert one_sentence(str(exc)), str(exc)
                assert await snapshot(ns) == held
                event("refused against the namespace")
                return
            event("applied")
            said = await msconfig.apply(ns, config)
            assert said[-1].startswith("Config.json: 0 created, 0 updated"), said

    asyncio.run(main())


@settings(max_examples=40, deadline=None, database=None, derandomize=True, phases=PHASES,
          suppress_health_check=list(HealthCheck))
@given(raw=config_files(), before=st.sampled_from(BEFORE))
@example(raw=json.dumps(changed(lambda ns: ns["Queues"].append({"Name": "z", "Properties": {
    "ForwardTo": "nowhere"}}))).encode(), before=_nothing)
@example(raw=json.dumps(EVERY_KEY).encode(), before=_sessions_differ)
def test_with_a_data_dir_a_refused_file_commits_nothing(tmp_path_factory, raw, before):
    """The same, served as ``aiosb serve --config --data-dir`` does (the file applied
    before the server listens, then the journal committed): after a refusal and a
    restart, the journal holds what it held before, nothing of the file."""
    folder = tmp_path_factory.mktemp("durable")
    path = folder / "Config.json"
    path.write_bytes(raw)
    config = _read(path)
    if config is None:
        return
    loaded = config

    async def state() -> dict[str, Any]:
        emulator.reset()
        async with serve(data_dir=folder / "data"), \
                aiosb.connect("memory://sbemulatorns") as ns:
            return await snapshot(ns)

    async def main() -> None:
        emulator.reset()

        async def made() -> None:
            async with aiosb.connect("memory://sbemulatorns") as ns:
                await before(ns)

        async with serve(data_dir=folder / "data", prepare=made):
            pass
        held = await state()
        emulator.reset()

        async def prepare() -> None:
            async with aiosb.connect("memory://sbemulatorns") as ns:
                await msconfig.apply(ns, loaded)

        try:
            async with serve(data_dir=folder / "data", prepare=prepare):
                pass
        except msconfig.ConfigError as exc:
            assert one_sentence(str(exc)), str(exc)
            assert await state() == held
            event("refused against the namespace")
        else:
            event("applied")
        emulator.reset()

    asyncio.run(main())


# -- the command: one sentence on stderr, no traceback, nothing in --data-dir ------------


@pytest.mark.parametrize(("text", "said"), [
    (json.dumps(changed(_set("LockDuration", "P99999999999D"))),
     f'{Q0}.LockDuration: "P99999999999D" is longer than'),
    ("[" * 100_000, "nests objects and arrays 100000 deep"),
    (json.dumps(changed(lambda ns: ns["Topics"][0]["Subscriptions"].append(
        {"Name": "Everything"}))), f"{NS}.Topics[0].Subscriptions[4].Name: 'Everything' is "
     "given twice"),
    (json.dumps(changed(lambda ns: ns["Queues"].append({"Name": "z", "Properties": {
        "ForwardTo": "nowhere"}}))), f"{NS}.Queues[3].Properties.ForwardTo: 'nowhere' is "
     "neither"),
    (json.dumps(changed(_rule(2, "SqlFilter", {"SqlExpression": "a = '" + "x" * 2000 + "'"}))),
     f"{RULE2}.SqlFilter.SqlExpression: the SQL filter is 2006 characters"),
    (json.dumps(changed(_rule(1, "CorrelationFilter", {"Properties": {"": 1}}))),
     f"{RULE1}.CorrelationFilter: a correlation filter parameter name must be text"),
    (json.dumps(changed(lambda ns: ns.update(Name="a/b"))),
     f"{NS}.Name: namespace name 'a/b' is not valid"),
], ids=["overflow", "nesting", "twice", "half-way", "sql-long", "property-named-empty",
        "namespace-name"])
def test_the_command_stops_with_one_sentence_and_nothing_in_its_data_dir(tmp_path, text, said):
    """``aiosb serve --config BAD --data-dir D`` exits 2 before it listens, one line on
    stderr naming the file, the path and the field, no traceback; D holds no entity."""
    path = tmp_path / "Config.json"
    path.write_text(text)
    data = tmp_path / "data"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "aiosb.cli", "serve", "--config", str(path), "--data-dir",
             str(data), "--port", "0", "--amqp-port", "0", "--amqps-port", "0", "--tls-dir",
             str(tmp_path / "tls"), "--quiet"],
            capture_output=True, text=True, timeout=60,
        )
    except subprocess.TimeoutExpired as exc:  # it served the file instead
        raise AssertionError(f"the server took the file and ran: {exc.stdout!r}") from None
    line = done.stderr.strip()
    assert done.returncode == 2, done.stderr[-2000:]
    assert line.startswith(f"aiosb: {path}: {said}"), line[-2000:]
    assert one_sentence(line) and "Traceback" not in done.stderr
    assert "listening" not in done.stdout

    async def held() -> dict[str, Any]:
        emulator.reset()
        async with serve(data_dir=data), aiosb.connect("memory://sbemulatorns") as ns:
            return await snapshot(ns)

    assert asyncio.run(held()) == {}
