"""Issue 47: what Microsoft's own live tests of the administration client (azure-servicebus
7.15's ``tests/mgmt_tests``) found aiosb serve answering otherwise than Service Bus, each
checked here with the official client (unmodified) over HTTPS: forwarding targets come
back as ``sb://HOST/NAME`` and may name the entity itself; authorization rules on a queue
or topic are kept; ``max_message_size_in_kilobytes`` only on a premium namespace and
from api-version 2021-05; rule parameters that are times come back as sent; topics
count their filters under api-version 2024-05; nested entity names whose first segment
could be a namespace are the default namespace's."""

from __future__ import annotations

import contextlib
import datetime
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import aiosb
from aiosb import emulator
from aiosb.auth import DEV_KEY, DEV_KEY_NAME
from aiosb.server import tls as _tls
from aiosb.server.http import REQUEST_FIRST_BYTES, serve

pytest.importorskip("cryptography")
management = pytest.importorskip("azure.servicebus.aio.management")
models = pytest.importorskip("azure.servicebus.management")
core = pytest.importorskip("azure.core.exceptions")
_names = itertools.count(1)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _tls.self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def served(certificate) -> AsyncIterator[Callable[..., Any]]:
    """``await served(tier=..., api_version=..., like=client)``: an administration
    client of a fresh default namespace of that tier, served over HTTPS at the root (or
    of the same server as the client ``like``); ``.namespace`` names the namespace and
    ``.port`` is the server's port."""
    cert, key = certificate
    async with contextlib.AsyncExitStack() as stack:

        async def open_client(tier: str = "standard", like: Any = None, **kw: Any) -> Any:
            if like is None:
                name = f"parityns{next(_names)}"
                emulator.namespace(name, tier=tier)
                server = await stack.enter_async_context(
                    serve(ssl_context=_tls.context(cert, key), root=name))
                port = server.url.rsplit(":", 1)[1]
            else:
                name, port = like.namespace, like.port
            connection = (f"Endpoint=sb://localhost:{port};SharedAccessKeyName={DEV_KEY_NAME};"
                          f"SharedAccessKey={DEV_KEY}")
            client = management.ServiceBusAdministrationClient.from_connection_string(
                connection, connection_verify=str(cert), **kw)
            await stack.enter_async_context(client)
            client.namespace, client.port = name, port
            return client

        yield open_client


async def test_forwarding_targets_come_back_as_addresses_and_may_name_the_entity(served):
    """Service Bus answers ``ForwardTo`` as ``sb://HOST/NAME`` (Microsoft's tests check
    the end: ``HOST/NAME``), whichever form was sent, and lets a queue or subscription
    forward to itself (test_mgmt_queue_update_success, ..._subscription_update_success)."""
    client = await served()
    host = f"localhost:{client.port}"
    await client.create_topic("events")
    made = await client.create_queue("orders", forward_to="events",
                                     forward_dead_lettered_messages_to="events")
    assert made.forward_to == f"sb://{host}/events"
    assert made.forward_dead_lettered_messages_to == f"sb://{host}/events"
    queue = await client.get_queue("orders")
    assert queue.forward_to == f"sb://{host}/events"
    queue.forward_to = f"sb://{host}/orders"  # itself, given as an address
    queue.forward_dead_lettered_messages_to = "orders"  # itself, given as a name
    await client.update_queue(queue)
    queue = await client.get_queue("orders")
    assert queue.forward_to == queue.forward_dead_lettered_messages_to == f"sb://{host}/orders"
    listed = [q async for q in client.list_queues()]
    assert [q.forward_to for q in listed] == [f"sb://{host}/orders"]
    made = await client.create_queue("selfmade", forward_to="selfmade")  # made so
    assert made.forward_to == f"sb://{host}/selfmade"
    await client.delete_queue("selfmade")
    await client.create_subscription("events", "loop", forward_to="events")  # its topic
    sub = await client.get_subscription("events", "loop")
    assert sub.forward_to == f"sb://{host}/events"
    async with aiosb.connect(f"memory://{client.namespace}") as ns:  # aiosb: the name
        assert (await ns.get_queue("orders")).forward_to == "orders"


async def test_a_message_on_a_queue_forwarding_to_itself_is_dead_lettered(served):
    """What Service Bus does with the loop: four hops, then the dead-letter queue with
    MaxTransferHopCountExceeded; nothing goes round for ever."""
    client = await served()
    await client.create_queue("self")
    queue = await client.get_queue("self")
    queue.forward_to = "self"
    await client.update_queue(queue)
    async with aiosb.connect(f"memory://{client.namespace}") as ns:
        await ns.sender("self").send(aiosb.Message(b"round"))
        async with ns.receiver("self", sub_queue="deadletter") as receiver:
            (dead,) = await receiver.receive(max_wait=1)
        assert dead.body == b"round"
        assert dead.dead_letter_reason == "MaxTransferHopCountExceeded"


def _rule(name: str, *rights: str) -> Any:
    return models.AuthorizationRule(
        type="SharedAccessAuthorizationRule", key_name=name, claim_type="SharedAccessKey",
        claim_value="None", rights=list(rights), primary_key="cHJpbWFyeQ==",
        secondary_key="c2Vjb25kYXJ5")


async def test_authorization_rules_of_a_queue_and_a_topic_are_kept(served):
    """test_mgmt_queue_create_with_queue_description and ..._update_success: the rules
    given are read back, with their rights and keys."""
    client = await served()
    await client.create_queue("orders", authorization_rules=[_rule("all", "Manage", "Listen",
                                                                    "Send")])
    queue = await client.get_queue("orders")
    (rule,) = queue.authorization_rules
    assert (rule.key_name, sorted(rule.rights)) == ("all", ["Listen", "Manage", "Send"])
    assert (rule.primary_key, rule.secondary_key) == ("cHJpbWFyeQ==", "c2Vjb25kYXJ5")
    queue.authorization_rules = [_rule("listen", "Listen")]
    await client.update_queue(queue)
    (rule,) = (await client.get_queue("orders")).authorization_rules
    assert (rule.key_name, rule.rights) == ("listen", ["Listen"])
    await client.create_topic("events", authorization_rules=[_rule("send", "Send")])
    (rule,) = (await client.get_topic("events")).authorization_rules
    assert (rule.key_name, rule.rights) == ("send", ["Send"])


async def test_max_message_size_is_a_premium_setting_of_api_version_2021_05(served):
    """Refused on a standard namespace (what aiosb serve's $namespaceinfo says it is) and
    under api-version 2017-04; on a premium one from 1024 (the default) to 102400."""
    standard = await served()
    assert (await standard.get_namespace_properties()).messaging_sku == "Standard"
    with pytest.raises(core.HttpResponseError):
        await standard.create_queue("big", max_message_size_in_kilobytes=1024)
    with pytest.raises(core.HttpResponseError):
        await standard.create_topic("big", max_message_size_in_kilobytes=1024)
    assert (await standard.create_queue("plain")).max_message_size_in_kilobytes is None
    premium = await served("premium")
    assert (await premium.get_namespace_properties()).messaging_sku == "Premium"
    made = await premium.create_queue("big", max_message_size_in_kilobytes=12345)
    assert made.max_message_size_in_kilobytes == 12345
    assert (await premium.create_topic("t")).max_message_size_in_kilobytes == 1024
    for wrong in (1023, 102401):
        with pytest.raises(core.HttpResponseError):
            await premium.create_queue("wrong", max_message_size_in_kilobytes=wrong)
    old = await served(like=premium, api_version=models.ApiVersion.V2017_04)
    await old.create_queue("old")
    assert (await old.get_queue("old")).max_message_size_in_kilobytes is None
    with pytest.raises(core.HttpResponseError):
        await old.create_queue("older", max_message_size_in_kilobytes=1024)


async def test_times_in_rules_come_back_as_they_were_sent(served):
    """test_mgmt_rule_create: a naive datetime parameter (sent without a zone) is
    answered without one, as Service Bus echoes it, in SQL parameters, actions and
    correlation properties; one sent with a zone keeps it."""
    client = await served()
    naive = datetime.datetime(2020, 7, 5, 11, 12, 13)
    aware = datetime.datetime(2020, 7, 5, 11, 12, 13, tzinfo=datetime.UTC)
    await client.create_topic("events")
    await client.create_subscription("events", "audit")
    await client.create_rule(
        "events", "audit", "sql",
        filter=models.SqlRuleFilter("t = @t AND u = @u", {"@t": naive, "@u": aware}),
        action=models.SqlRuleAction("SET a = @a", {"@a": naive}))
    await client.create_rule("events", "audit", "corr",
                             filter=models.CorrelationRuleFilter(properties={"when": naive}))
    sql = await client.get_rule("events", "audit", "sql")
    assert sql.filter.parameters == {"@t": naive, "@u": aware}
    assert sql.action.parameters == {"@a": naive}
    assert (await client.get_rule("events", "audit", "corr")).filter.properties == {
        "when": naive}


async def test_topics_count_their_filters_under_api_version_2024_05(served):
    """test_topic_filter_counts_live: $Default (a true filter) and a SQL rule are two SQL
    filters, a correlation rule one; 2021-05 answers have neither count."""
    client = await served()
    await client.create_topic("counted")
    await client.create_subscription("counted", "sub1")
    await client.create_rule("counted", "sub1", "sqlRule", filter=models.SqlRuleFilter("1=1"))
    await client.create_rule("counted", "sub1", "correlationRule",
                             filter=models.CorrelationRuleFilter(correlation_id="abc"))
    counts = await client.get_topic_runtime_properties("counted")
    assert (counts.sql_filter_count, counts.correlation_filter_count) == (2, 1)
    older = await served(like=client, api_version=models.ApiVersion.V2021_05)
    counts = await older.get_topic_runtime_properties("counted")
    assert (counts.sql_filter_count, counts.correlation_filter_count) == (None, None)


async def test_nested_names_are_entities_even_where_a_namespace_could_be_named(served):
    """test_mgmt_queue_list_with_special_chars: ``txt/.-_123`` is a queue of the default
    namespace, not queue ``.-_123`` of a namespace ``txt`` (the client sends the name as
    one segment, its slash encoded)."""
    client = await served()
    await client.create_queue("txt/.-_123")
    assert [q.name async for q in client.list_queues()] == ["txt/.-_123"]
    assert (await client.get_queue("txt/.-_123")).name == "txt/.-_123"
    await client.create_topic("txt/t")
    await client.create_subscription("txt/t", "s")
    assert [s.name async for s in client.list_subscriptions("txt/t")] == ["s"]
    assert not emulator.exists("txt")
    await client.delete_queue("txt/.-_123")
    assert [q.name async for q in client.list_queues()] == []


def test_authorization_rules_survive_the_durable_store():
    """A durable server keeps an entity's authorization rules (its row holds their
    fields), keys and all."""
    from aiosb.emulator.durable._rows import decode_props, encode_props
    from aiosb.entities import AuthorizationRule, QueueProperties

    props = QueueProperties("orders", authorization_rules=(
        AuthorizationRule("reader", ("Listen",)),)).normalised()
    (rule,) = props.authorization_rules
    assert rule.primary_key and rule.secondary_key  # made, as Service Bus makes them
    assert decode_props("queue", encode_props(props)) == props
    assert rule.primary_key not in repr(props)  # nor in a log line of the description
    assert rule.secondary_key not in repr(rule)


async def test_the_amqp_ports_management_serves_one_namespace_whole_paths(certificate):
    """At the AMQP port (one namespace: what the data plane's connection string reaches,
    #34) a path is an entity path whole, as on Service Bus, also unencoded as the
    JavaScript administration client sends it: ``PUT /txt/a`` makes queue ``txt/a``.
    The HTTP port still reads ``/txt/a`` as queue ``a`` of namespace ``txt``, and
    ``/NAME/...`` at the AMQP port still names its own namespace (aiosb's address)."""
    import ssl

    import aiohttp

    from aiosb import SasCredential
    from aiosb.server.amqp import serve_amqp

    cert, key = certificate
    name = f"parityns{next(_names)}"
    other, elsewhere = f"otherns{next(_names)}", f"elsewherens{next(_names)}"
    emulator.namespace(name)
    body = ('<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
            '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/'
            'servicebus/connect"/></content></entry>')
    trust = ssl.create_default_context(cafile=str(cert))
    credential = SasCredential(DEV_KEY_NAME, DEV_KEY)
    async with serve(ssl_context=_tls.context(cert, key), root=name) as server, serve_amqp(
            namespace=name, tls=_tls.context(cert, key),
            others=[(REQUEST_FIRST_BYTES, server.route)],
    ) as amqp, aiohttp.ClientSession() as session:

        async def put(port: int, path: str) -> int:
            url = f"https://localhost:{port}{path}"
            headers = {"Authorization": credential.token(url),
                       "Content-Type": "application/atom+xml"}
            async with session.put(url, data=body, headers=headers, ssl=trust) as answer:
                return answer.status

        assert await put(amqp.port, "/txt/a") == 201
        assert await put(amqp.port, f"/{other}/b") == 201  # an entity of this namespace
        assert await put(amqp.port, f"/{name}/c") == 201  # aiosb's address of it
        port = int(server.url.rsplit(":", 1)[1])
        assert await put(port, f"/{elsewhere}/d") == 201  # the HTTP port: a namespace
    async with aiosb.connect(f"memory://{name}") as ns:
        assert sorted(q.name for q in await ns.list_queues()) == sorted(
            ["txt/a", f"{other}/b", "c"])
    assert not emulator.exists("txt")
    assert not emulator.exists(other)
    async with aiosb.connect(f"memory://{elsewhere}") as ns:
        assert [q.name for q in await ns.list_queues()] == ["d"]


def test_the_explorer_shows_authorization_rules_without_their_keys():
    """The explorer's settings of an entity name each rule and its rights; the keys,
    which a Listen-only visitor must not read, are left out."""
    from aiosb.entities import AuthorizationRule
    from aiosb.server.explorer._operations import plain

    shown = plain((AuthorizationRule("reader", ("Listen",), "secret1", "secret2"),))
    assert shown == ["reader (Listen)"]


async def test_aiosb_over_http_reads_a_forwarding_address_as_the_name():
    """The server answers ``sb://HOST/a``; aiosb's HTTP transport gives ``a``, as its
    memory transport does (and as it reads a real namespace's answer)."""
    async with serve() as server, aiosb.connect(server.namespace_url("fwdreadns")) as ns:
        await ns.create_queue("a")
        await ns.create_queue("b", forward_to="a", forward_dead_lettered_messages_to="a")
        got = await ns.get_queue("b")
        assert (got.forward_to, got.forward_dead_lettered_messages_to) == ("a", "a")
        assert [q.forward_to for q in await ns.list_queues()] == [None, "a"]


def test_aiosb_over_amqp_hands_authorization_rules_to_the_sdk_and_back():
    """aiosb's AMQP transport manages through the SDK's administration client: the rules
    go to it as its AuthorizationRule and come back as aiosb's."""
    import inspect

    from aiosb.entities import AuthorizationRule, QueueProperties
    from aiosb.transport.amqp._convert import entity_from_sdk, entity_kwargs

    props = QueueProperties("orders", authorization_rules=(
        AuthorizationRule("reader", ("Listen",), "cHJpbWFyeQ==", "c2Vjb25kYXJ5"),)
    ).normalised()
    kwargs = entity_kwargs("queue", props)
    (sdk_rule,) = kwargs["authorization_rules"]
    assert isinstance(sdk_rule, models.AuthorizationRule)
    assert (sdk_rule.key_name, sdk_rule.rights) == ("reader", ["Listen"])
    names = inspect.signature(models.QueueProperties).parameters
    sdk_props = models.QueueProperties("orders", **{
        n: kwargs.get(n) for n in names if n != "name" and names[n].kind is names[n].KEYWORD_ONLY})
    assert entity_from_sdk("queue", sdk_props).authorization_rules == props.authorization_rules


def test_every_port_the_http_site_listens_at_serves_every_namespace():
    """Port 0 on a host name of two addresses (``localhost``: 127.0.0.1 and ::1) binds
    each address to a port of its own: a request at any of them is the HTTP site's,
    where ``/NAME/...`` names a namespace; only a port the site does not listen at (the
    AMQP port, which hands HTTP over) serves its one namespace whole (#47)."""
    from types import SimpleNamespace

    from aiosb.server.http._app import EmulatorServer

    server = EmulatorServer()
    server.ports = frozenset((5001, 5002))

    def at(port: int) -> Any:
        sockname = ("::1", port, 0, 0)
        return SimpleNamespace(transport=SimpleNamespace(get_extra_info=lambda _: sockname))

    assert not server._one_namespace(at(5001))
    assert not server._one_namespace(at(5002))
    assert server._one_namespace(at(5672))
