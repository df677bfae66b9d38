"""Issue 18, items 1 and 2: a REST receive never deletes a message it cannot answer with,
and what the REST protocol cannot carry is refused at send, naming it."""

from __future__ import annotations

import aiohttp
import pytest

import aiosb
from aiosb import Message, errors
from aiosb.auth import SasCredential
from aiosb.server.http import serve


async def _rest(server, name: str):
    url = server.namespace_url(name)
    token = SasCredential(server.key_name, server.key).token(url)
    return url, aiohttp.ClientSession(headers={"Authorization": token})


@pytest.mark.parametrize("method", ["DELETE", "POST"], ids=["receive-and-delete", "peek-lock"])
async def test_a_content_type_with_parameters_is_answered_as_sent(method):
    async with serve() as server:
        url, http = await _rest(server, "ct")
        async with aiosb.connect(url) as ns, http:
            await ns.create_queue("q")
            sent = await http.post(f"{url}/q/messages", data=b"hi",
                                   headers={"Content-Type": "text/plain; charset=utf-8"})
            assert sent.status == 201
            got = await http.request(method, f"{url}/q/messages/head?timeout=1")
            assert got.status in (200, 201), await got.text()
            assert got.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert await got.read() == b"hi"


async def test_a_message_the_rest_protocol_cannot_answer_with_stays_in_the_queue():
    """Something got past send (here: a property set after the Message was checked):
    receive-and-delete answers 400 and the message is still there for other protocols."""
    async with serve() as server:
        url, http = await _rest(server, "odd")
        async with aiosb.connect(url) as ns, http:
            await ns.create_queue("q")
            odd = Message(b"keep me")
            odd.application_properties = {"not a header": 1}
            async with aiosb.connect("memory://odd") as local:
                await local.sender("q").send(odd)
            got = await http.delete(f"{url}/q/messages/head?timeout=1")
            assert got.status == 400
            assert "'not a header' cannot be an HTTP header name" in await got.text()
            async with ns.receiver("q", mode="receive_and_delete") as receiver:
                [kept] = await receiver.receive(max_messages=5, max_wait=0)
            assert kept.body == b"keep me"


@pytest.mark.parametrize("name", ["", "a b", "trailing ", "x\r\ny", "ünï", "tab\t"])
def test_property_names_rest_cannot_carry_are_refused_at_send_naming_them(name):
    with pytest.raises(errors.InvalidArgument, match="application property name"):
        Message(b"x", application_properties={name: 1})


@pytest.mark.parametrize("value", ["text/plain\r\nX-Evil: 1", "tëxt/plain", "a\x00b"])
def test_content_types_that_cannot_be_a_header_are_refused_at_send(value):
    with pytest.raises(errors.InvalidArgument, match="content_type"):
        Message(b"x", content_type=value)


async def test_the_batch_format_refuses_them_too():
    async with serve() as server, aiosb.connect(server.namespace_url("b")) as ns:
        await ns.create_queue("q")
        odd = Message(b"x")
        odd.application_properties = {"a b": 1}
        with pytest.raises(errors.InvalidArgument, match="'a b'"):
            await ns.sender("q").send(odd)
        assert (await ns.runtime_properties("q")).active_message_count == 0


@pytest.mark.parametrize("days", [2_000_000, 10_675_199, 999_999_999])
async def test_a_huge_time_to_live_means_never_and_expires_at_stays_valid(days):
    """Issue 18, item 4: TimeSpan.MaxValue (or near it) is "never", not a crash."""
    from datetime import timedelta

    async with aiosb.connect("memory://ttl") as ns:
        await ns.create_queue("q")
        await ns.sender("q").send(Message(b"x", time_to_live=timedelta(days=days)))
        async with ns.receiver("q") as receiver:
            [got] = await receiver.peek(1)
        assert got.expires_at is None


@pytest.mark.parametrize("seconds", [8.64e13, 9e13, 9.99e14, 1e300])
async def test_a_huge_rest_time_to_live_is_accepted_as_never(seconds):
    async with serve() as server:
        url, http = await _rest(server, "ttl")
        async with aiosb.connect(url) as ns, http:
            await ns.create_queue("q")
            sent = await http.post(f"{url}/q/messages", data=b"x",
                                   headers={"BrokerProperties": f'{{"TimeToLive": {seconds}}}'})
            assert sent.status == 201, await sent.text()
            async with ns.receiver("q") as receiver:
                [got] = await receiver.peek(1)
            assert got.expires_at is None


@pytest.mark.parametrize(
    "kw",
    [{"session_id": "s\ud800"}, {"subject": "\udfff"}, {"message_id": "m\ud800x"},
     {"application_properties": {"p": "v\ud800"}}, {"to": "\ud800"}],
    ids=["session_id", "subject", "message_id", "property", "to"],
)
def test_lone_surrogates_are_refused_at_send_naming_the_field(kw):
    """Issue 18, item 5: InvalidArgument naming the field, not a bare UnicodeEncodeError."""
    name = next(iter(kw))
    with pytest.raises(errors.InvalidArgument, match="lone surrogate") as caught:
        Message(b"x", **kw)
    assert (name if name != "application_properties" else "'p'") in caught.value.message
    with pytest.raises(errors.InvalidArgument, match="body holds a lone surrogate"):
        Message("\ud800")


async def test_a_lone_surrogate_over_rest_is_a_400_not_a_500():
    async with serve() as server:
        url, http = await _rest(server, "sur")
        async with aiosb.connect(url) as ns, http:
            await ns.create_queue("q")
            sent = await http.post(f"{url}/q/messages", data=b"x",
                                   headers={"BrokerProperties": '{"Label": "\\ud800"}'})
            assert sent.status == 400
            assert "lone surrogate" in await sent.text()
            assert (await ns.runtime_properties("q")).active_message_count == 0
