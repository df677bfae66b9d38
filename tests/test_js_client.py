"""Issue 15: the official JavaScript client (@azure/service-bus, from npm) against aiosb
serve over AMQP, unmodified: it sends one message and a batch, and receives them. Issue
47: rhea (npm), an AMQP 1.0 client by the specification, sends and receives too. Skipped
with a reason only where node or npm is absent."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import aiosb
from aiosb.server.amqp.front_end import serve_amqp

JS = Path(__file__).parent / "js"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="the JavaScript client test needs node and npm (Node 20)",
)


@pytest.fixture(scope="module")
def js_client() -> Path:
    """tests/js with @azure/service-bus (and its 7.10 beta as sb-beta), rhea and ws
    installed (npm, once)."""
    modules = JS / "node_modules"
    if not all((modules / name).is_dir() for name in ("@azure/service-bus", "rhea", "ws",
                                                      "sb-beta")):
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=JS, capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return JS


async def _node(js_client: Path, script: str, *args: str, env: dict[str, str] | None = None
                ) -> Any:
    """Run ``script`` of tests/js with ``args``; what it printed last, as JSON (a failed
    run fails the test with the end of its stderr)."""
    node = await asyncio.create_subprocess_exec(
        "node", str(js_client / script), *args, cwd=js_client,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    out, err = await asyncio.wait_for(node.communicate(), 90)
    assert node.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


async def test_the_javascript_client_sends_and_receives(js_client: Path):
    async with serve_amqp(namespace="jsclient") as server:
        async with aiosb.connect("memory://jsclient") as ns:
            await ns.create_queue("orders")
        got = await _node(js_client, "sendreceive.mjs", server.connection_string(), "orders")
    assert got[0] == {"body": "from node", "subject": "js", "messageId": got[0]["messageId"],
                      "n": 7}
    assert [m["body"] for m in got[1:]] == [f"b{i}" for i in range(10)]
    assert [m["messageId"] for m in got[1:]] == [f"m{i}" for i in range(10)]


async def test_the_javascript_beta_deletes_messages_in_batches(js_client: Path):
    """#47: com.microsoft:batch-delete-messages from @azure/service-bus 7.10.0-beta.2
    (``deleteMessages``, ``purgeMessages``): the oldest messages enqueued before the
    bound, at most the count asked for; a locked message stays; 0 once none is left
    (the 204 the SDK reads so); more than 500 a request refused on the standard tier,
    as Service Bus limits it."""
    async with serve_amqp(namespace="jsbatchdelete") as server:
        async with aiosb.connect("memory://jsbatchdelete") as ns:
            await ns.create_queue("old")
        got = await _node(js_client, "batchdelete.mjs", server.connection_string(), "old")
    assert (got["three"], got["rest"], got["none"]) == (3, 2, 0)
    assert got["left"] == ["new0", "new1"]
    assert got["locked"] == "new0"
    assert (got["purged"], got["afterPurge"]) == (1, ["new0"])
    assert "500" in got["over"]["message"] and "standard" in got["over"]["message"]
    assert got["most"] == {"value": 0}


async def test_the_javascript_client_knows_a_missing_entity_at_once(js_client: Path):
    """A send (a refused link) and a peek (a $management request) on a queue that does
    not exist fail with MessagingEntityNotFound, not retried: the service's sentence,
    which the SDK recognises (amqp:not-found alone is a communication problem to it)."""
    async with serve_amqp(namespace="jsmissing") as server:
        got = await _node(js_client, "missing.mjs", server.connection_string(), "nope")
    for what in ("send", "peek"):
        assert got[what]["code"] == "MessagingEntityNotFound", got[what]
        assert got[what]["retryable"] is False
        assert "'nope'" in got[what]["message"]


async def test_the_javascript_admin_client_manages_entities_over_https(js_client, tmp_path):
    """ServiceBusAdministrationClient of @azure/service-bus, with aiosb serve's certificate
    trusted through NODE_EXTRA_CA_CERTS: queues, topics, subscriptions, rules, counts and
    the namespace's properties (it reads names from entry ids, in Service Bus's
    capitalisation: topic/Subscriptions/sub/Rules/rule)."""
    import os

    from aiosb.auth import DEV_KEY, DEV_KEY_NAME
    from aiosb.server import tls as _tls
    from aiosb.server.http import serve

    pytest.importorskip("cryptography")
    cert, key = _tls.self_signed(tmp_path)
    async with serve(ssl_context=_tls.context(cert, key), root="jsadmin") as server:
        port = server.url.rsplit(":", 1)[1]
        connection = (f"Endpoint=sb://localhost:{port};SharedAccessKeyName={DEV_KEY_NAME};"
                      f"SharedAccessKey={DEV_KEY}")
        got = await _node(js_client, "admin.mjs", connection,
                          env={**os.environ, "NODE_EXTRA_CA_CERTS": str(cert)})
    assert got == {
        "maxDeliveryCount": 4, "queues": ["jsorders"], "rules": ["$Default", "eu"],
        "active": 0, "namespace": "jsadmin",
    }


async def test_the_javascript_admin_client_takes_the_data_plane_connection_string(
        js_client: Path, tmp_path: Path):
    """Issue 34: the string the JavaScript data plane takes (AMQP port,
    ``UseDevelopmentEmulator=true``) manages too: aiosb serve's AMQP port answers the
    administration client's HTTP(S) with the management API."""
    import os

    from aiosb.server.process import ServerProcess

    pytest.importorskip("cryptography")
    with ServerProcess(args=["--tls-dir", str(tmp_path)]) as server:
        got = await _node(js_client, "admin.mjs", server.amqp_connection_string,
                          env={**os.environ, "NODE_EXTRA_CA_CERTS": server.certificate})
    assert got == {
        "maxDeliveryCount": 4, "queues": ["jsorders"], "rules": ["$Default", "eu"],
        "active": 0, "namespace": "sbemulatorns",
    }


async def test_the_javascript_client_settles_in_peek_lock_mode(js_client: Path):
    """Complete and abandon from @azure/service-bus: the abandoned message comes back
    with its delivery count raised; the completed ones are gone. The SDK shows the AMQP
    header's count, the deliveries before this one (Service Bus writes its count less
    one): 1 on the second delivery."""
    async with serve_amqp(namespace="jspeeklock") as server:
        async with aiosb.connect("memory://jspeeklock") as ns:
            await ns.create_queue("orders")
            got = await _node(js_client, "peeklock.mjs", server.connection_string(), "orders")
            left = (await ns.runtime_properties("orders")).active_message_count
    assert sorted(got["first"]) == [f"p{i}" for i in range(5)]
    assert got["again"] == [["p2", 1]]
    assert left == 0


async def test_the_javascript_rule_manager_adds_lists_and_removes_rules_that_route(
        js_client: Path):
    """createRuleManager of @azure/service-bus over serve_amqp's $management (add-rule,
    enumerate-rules, remove-rule): the rules it adds route the topic's messages as rules
    made any other way do, its errors are the service's (#15)."""
    from aiosb import emulator
    from aiosb.protocol import ReceiveRequest

    async with serve_amqp(namespace="jsrules") as server:
        async with aiosb.connect("memory://jsrules") as ns:
            await ns.create_topic("orders")
            await ns.create_subscription("orders", "eu")
            await ns.create_subscription("orders", "rush")
            got = await _node(js_client, "rules.mjs", server.connection_string(), "orders")
            broker = emulator.namespace("jsrules")
            took = {
                sub: await broker.receive(f"orders/subscriptions/{sub}", ReceiveRequest(
                    "receive_and_delete", max_messages=10, max_wait=0))
                for sub in ("eu", "rush")
            }
            rules = [r.name for r in await ns.list_rules("orders", "eu")]
    assert got["before"] == [["$Default", "1=1", None],
                             ["eu", "region = 'eu'", "SET tagged = 'yes'"]]
    assert got["listed"] == [["rush", "urgent", {"kind": "rush"}]]
    assert got["after"] == []
    errors = {what: text.split(":")[0] for what, text in got["errors"].items()}
    # com.microsoft:entity-already-exists, amqp:not-found with the service's sentence, and
    # com.microsoft:argument-error, which the SDK has no code of its own for.
    assert errors == {"duplicate": "MessagingEntityAlreadyExists", "badSql": "GeneralError",
                      "missing": "MessagingEntityNotFound"}
    assert "the SQL filter has a problem" in got["errors"]["badSql"]
    # What was not found is the rule, named by its path, not its subscription (which is).
    assert "/rules/$Default' could not be found" in got["errors"]["missing"]
    # A JS string body travels as an amqp-value, which aiosb reads as its JSON text.
    assert [(json.loads(m.body), m.application_properties.get("tagged"))
            for m in took["eu"]] == [("m-eu", "yes")]
    assert [json.loads(m.body) for m in took["rush"]] == ["m-rush"]
    assert rules == ["eu"]


async def test_the_javascript_client_beats_through_the_idle_timeout(
    js_client, monkeypatch, amqp_closes
):
    """The JavaScript client sends a heartbeat at half the idle timeout aiosb serve's OPEN
    says (4 s here): idle for 9 s, its connection is never closed, and it sends on."""
    from aiosb.server.amqp import _links, connection

    monkeypatch.setattr(_links, "IDLE_SECONDS", 4.0)
    monkeypatch.setattr(connection, "IDLE_SECONDS", 4.0)
    async with serve_amqp(namespace="jsidle") as server:
        async with aiosb.connect("memory://jsidle") as ns:
            await ns.create_queue("orders")
        got = await _node(js_client, "idle.mjs", server.connection_string(), "orders", "9")
    assert sorted(got) == ["after", "before"]
    assert amqp_closes == []


async def test_a_javascript_session_receiver_settles_a_batch_smaller_than_asked(js_client):
    """A receive that returns fewer than asked ends in a drain, which the client gives
    200 ms before closing the link, and with it the session: the server answered it
    only when its long poll (up to 30 s) ended, so every completion of the batch failed
    with SessionLockLost and the messages came back counted. A drain now cuts the wait
    short and is answered at once."""
    async with serve_amqp(namespace="jsdrain") as server:
        async with aiosb.connect("memory://jsdrain") as ns:
            await ns.create_queue("sq", requires_session=True)
            await ns.sender("sq").send([aiosb.Message(b"a", session_id="S"),
                                        aiosb.Message(b"b", session_id="S")])
            got = await _node(js_client, "sessiondrain.mjs", server.connection_string(), "sq")
            left = (await ns.runtime_properties("sq")).total_message_count
    assert got == {"got": ["a", "b"], "settled": ["ok", "ok"], "second": []}
    assert left == 0


async def test_the_javascript_client_speaks_amqp_over_websockets(js_client: Path, tmp_path):
    """Issue 34: @azure/service-bus with webSocketOptions (the ws package), AMQP over
    WebSockets through aiosb serve's AMQP port, which answers TLS and HTTP there; the
    certificate trusted as docs/sdks.md says for Node (NODE_EXTRA_CA_CERTS)."""
    import os

    from aiosb.server.process import ServerProcess

    with ServerProcess(args=["--tls-dir", str(tmp_path)]) as server:
        async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
            await ns.create_queue("jsws")
        port = server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0]
        connection = server.amqp_connection_string.replace(";UseDevelopmentEmulator=true", "")
        env = dict(os.environ, NODE_EXTRA_CA_CERTS=server.certificate)
        got = await _node(js_client, "websocket.mjs", connection, "jsws",
                          f"https://localhost:{port}", env=env)
        async with aiosb.connect(f"{server.url}/sbemulatorns") as ns:
            left = await ns.runtime_properties("jsws")
    assert sorted(got) == ["ws 1", "ws 2", "ws 3"]
    assert left.active_message_count == 0  # completed, over the WebSocket


RHEA_COUNT = 1000


async def _rhea_round_trip(js_client: Path, namespace: str, mode: str, *login: str) -> Any:
    """rhea.mjs against a fresh server: 1,000 sent, accepted, received and accepted;
    what it printed, and what the queue holds after."""
    async with serve_amqp(namespace=namespace) as server:
        async with aiosb.connect(f"memory://{namespace}") as ns:
            await ns.create_queue("orders")
            got = await _node(js_client, "rhea.mjs", str(server.port), "orders",
                              str(RHEA_COUNT), mode, *login)
            for _ in range(100):  # the last accepts may land just after rhea's close
                left = (await ns.runtime_properties("orders")).total_message_count
                if not left:
                    break
                await asyncio.sleep(0.05)
    assert got["accepted"] == RHEA_COUNT
    assert got["received"] == [f"rhea {i}" for i in range(RHEA_COUNT)]
    # AMQP 2.6.3: the server's end of rhea's sender is a receiver, and the other way
    # round (rhea matches links by name alone and would go on with the wrong role).
    assert got["roles"] == {"sender": True, "receiver": False}
    assert left == 0
    return got


async def test_rhea_sends_and_receives_a_thousand_over_sasl_plain(js_client: Path):
    """#47: rhea signs in with a key's name and key (SASL PLAIN) and needs no token."""
    from aiosb.auth import DEV_KEY, DEV_KEY_NAME

    await _rhea_round_trip(js_client, "rheaplain", "plain", DEV_KEY_NAME, DEV_KEY)


async def test_rhea_sends_and_receives_through_anonymous_and_a_cbs_token(js_client: Path):
    """#47: ANONYMOUS, then a put-token on a ``$cbs`` sender and receiver pair, as the
    SDKs do, with a SharedAccessSignature for the namespace."""
    from aiosb.auth import DEV_KEY, DEV_KEY_NAME, SasCredential

    audience = "sb://127.0.0.1/"  # the namespace (a token names the host, not the port)
    token = SasCredential(DEV_KEY_NAME, DEV_KEY).token(audience)
    got = await _rhea_round_trip(js_client, "rheacbs", "cbs", audience, token)
    assert got["status"] == 200
