"""Issue 18, item 12: keys have rights as in Service Bus (Manage, Send, Listen); fault
injection and management need Manage; tokens live at most a year."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import aiosb
from aiosb import Message, errors
from aiosb.auth import SasCredential
from aiosb.server.http import serve

KEYS = {"sender": ("c2VuZGVy", ["Send"]), "listener": ("bGlzdGVuZXI=", ["Listen"])}


async def test_a_send_key_sends_and_does_nothing_else():
    async with serve(keys=KEYS) as server:
        url = server.namespace_url("rights")
        async with aiosb.connect(url) as admin:
            await admin.create_queue("q")
        async with aiosb.connect(url, credential=("sender", "c2VuZGVy")) as ns:
            await ns.sender("q").send(Message(b"allowed"))
            async with ns.receiver("q") as receiver:
                with pytest.raises(errors.Unauthorized, match="needs Listen"):
                    await receiver.receive(max_wait=0)
            with pytest.raises(errors.Unauthorized, match="needs Manage"):
                await ns.create_queue("other")
            with pytest.raises(errors.Unauthorized, match="needs Manage"):
                await ns.transport.faults.fail("q")
        async with aiosb.connect(url, credential=("listener", "bGlzdGVuZXI=")) as ns:
            async with ns.receiver("q") as receiver:
                [got] = await receiver.receive(max_wait=0)
                await receiver.complete(got)
            with pytest.raises(errors.Unauthorized, match="needs Send"):
                await ns.sender("q").send(Message(b"refused"))
            with pytest.raises(errors.Unauthorized, match="needs Manage"):
                await ns.transport.faults.heal()
        async with aiosb.connect(url) as admin:  # the server's own key can do it all
            assert (await admin.runtime_properties("q")).active_message_count == 0


async def test_a_token_valid_for_more_than_a_year_is_refused():
    async with serve() as server:
        url = server.namespace_url("long")
        credential = SasCredential(server.key_name, server.key, token_lifetime=400 * 86400)
        with pytest.raises(errors.Unauthorized, match="more than a year"):
            async with aiosb.connect(url, credential=credential) as ns:
                await ns.create_queue("q")
        assert "sr=" in credential.token(url, expiry=time.time() + 3600)


def test_serve_takes_send_and_listen_keys_and_refuses_a_malformed_one():
    bad = subprocess.run(
        [sys.executable, "-m", "aiosb.cli", "serve", "--send-key", "no-equals-sign"],
        capture_output=True, text=True, timeout=30,
    )
    assert bad.returncode == 2 and "--send-key takes NAME=KEY" in bad.stderr


async def test_a_token_for_another_host_is_refused():
    """The host in a token's resource is checked (the port is not: one machine)."""
    async with serve() as server:
        url = server.namespace_url("host")
        credential = SasCredential(server.key_name, server.key)
        port = server.url.rsplit(":", 1)[1]
        async with aiosb.connect(url) as ns:
            await ns.create_queue("q")
            http = ns.transport
            for resource, ok in [(f"http://127.0.0.1:{port}/host", True),
                                 ("sb://127.0.0.1:5672/host", True),
                                 (f"http://evil.example:{port}/host", False),
                                 ("other.servicebus.windows.net/host", False)]:
                token = credential.token(resource)
                http._token, http._token_until = token, time.time() + 600
                if ok:
                    await ns.get_queue("q")
                else:
                    with pytest.raises(errors.Unauthorized, match="is for host"):
                        await ns.get_queue("q")
