"""Issue 35: a drop-in for Microsoft's Service Bus emulator. ``aiosb serve --config
Config.json`` reads its file (every key of its published schema, files of our own written
from what the schema and its repository's examples say), ``--microsoft-emulator`` listens
and answers as it does (``/health``, its ports, its documented development key), and its
connection strings work as they are, through the official SDK and administration client.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ports import port_free

from aiosb.rules import CorrelationRuleFilter, SqlRuleAction, SqlRuleFilter
from aiosb.server import msconfig
from aiosb.server.process import ServerProcess

pytestmark = pytest.mark.timeout(120)

MIN = _dt.timedelta(minutes=1)
SECOND = _dt.timedelta(seconds=1)

#: Every key of Microsoft's schema, set to something other than its default.
EVERY_KEY: dict[str, Any] = {
    "UserConfig": {
        "Namespaces": [{
            "Name": "sbemulatorns",
            "Queues": [
                {"Name": "orders", "Properties": {
                    "DeadLetteringOnMessageExpiration": True,
                    "DefaultMessageTimeToLive": "P2DT3H",
                    "DuplicateDetectionHistoryTimeWindow": "PT2M",
                    "ForwardDeadLetteredMessagesTo": "graveyard",
                    "ForwardTo": "",
                    "LockDuration": "PT30S",
                    "MaxDeliveryCount": 7,
                    "RequiresDuplicateDetection": True,
                    "RequiresSession": True,
                }},
                {"Name": "graveyard"},
                {"Name": "relay", "Properties": {"ForwardTo": "graveyard"}},
            ],
            "Topics": [{
                "Name": "events.v1",
                "Properties": {
                    "DefaultMessageTimeToLive": "PT10M",
                    "DuplicateDetectionHistoryTimeWindow": "PT5S",
                    "RequiresDuplicateDetection": True,
                },
                "Subscriptions": [
                    {"Name": "by-headers", "Properties": {
                        "DeadLetteringOnMessageExpiration": True,
                        "DefaultMessageTimeToLive": "PT5M",
                        "LockDuration": "PT2M",
                        "MaxDeliveryCount": 5,
                        "ForwardDeadLetteredMessagesTo": "graveyard",
                        "ForwardTo": "",
                        "RequiresSession": False,
                    }, "Rules": [{
                        "Name": "every-header",
                        "Properties": {"FilterType": "Correlation", "CorrelationFilter": {
                            "ContentType": "application/json", "CorrelationId": "c-1",
                            "Label": "subject-1", "MessageId": "m-1", "ReplyTo": "replies",
                            "ReplyToSessionId": "rs-1", "SessionId": "s-1", "To": "someone",
                            "Properties": {"region": "eu", "tier": 2},
                        }},
                    }]},
                    {"Name": "by-property", "Rules": [{
                        "Name": "eu", "Properties": {
                            "FilterType": "Correlation",
                            "CorrelationFilter": {"Properties": {"region": "eu"}},
                        },
                    }]},
                    {"Name": "by-sql", "Rules": [{
                        "Name": "big", "Properties": {
                            "FilterType": "Sql",
                            "SqlFilter": {"SqlExpression": "qty > 10"},
                            "Action": {"SqlExpression": "SET sys.Label = 'big'"},
                        },
                    }]},
                    {"Name": "everything", "Properties": {"MaxDeliveryCount": 4}},
                ],
            }],
        }],
        "Logging": {"Type": "File,Console"},
    }
}


def write(folder: Path, data: Any, name: str = "Config.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(data, indent=2))
    return path


# -- reading the file -------------------------------------------------------------------


def test_every_key_of_the_schema_is_read_into_aiosb_terms(tmp_path):
    config = msconfig.load(write(tmp_path, EVERY_KEY))
    assert config.namespace == "sbemulatorns" and len(config.warnings) == 1  # PT5S, below
    by_path = {e.path: e for e in config.entities}
    assert list(by_path) == [
        "orders", "graveyard", "relay", "events.v1", "events.v1/subscriptions/by-headers",
        "events.v1/subscriptions/by-property", "events.v1/subscriptions/by-sql",
        "events.v1/subscriptions/everything",
    ]
    assert dict(by_path["orders"].properties) == {
        "dead_lettering_on_message_expiration": True,
        "default_message_time_to_live": _dt.timedelta(days=2, hours=3),
        "duplicate_detection_history_time_window": 2 * MIN,
        "forward_dead_lettered_messages_to": "graveyard", "forward_to": None,
        "lock_duration": _dt.timedelta(seconds=30), "max_delivery_count": 7,
        "requires_duplicate_detection": True, "requires_session": True,
    }
    sql = by_path["events.v1/subscriptions/by-sql"].rules
    assert sql is not None and sql[0].filter == SqlRuleFilter("qty > 10")
    assert sql[0].action == SqlRuleAction("SET sys.Label = 'big'")
    headers = by_path["events.v1/subscriptions/by-headers"].rules
    assert headers is not None and headers[0].filter == CorrelationRuleFilter(
        content_type="application/json", correlation_id="c-1", label="subject-1",
        message_id="m-1", reply_to="replies", reply_to_session_id="rs-1", session_id="s-1",
        to="someone", properties={"region": "eu", "tier": 2})
    assert by_path["events.v1/subscriptions/everything"].rules is None  # keeps $Default


def test_what_the_file_leaves_out_takes_microsofts_defaults_not_its_limits(tmp_path):
    data = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": "plain"},
        {"Name": "long", "Properties": {"DefaultMessageTimeToLive": "P14D",
                                        "LockDuration": "PT5M", "MaxDeliveryCount": 2000}},
    ]}], "Logging": {"Type": "File"}}}
    plain, long = msconfig.load(write(tmp_path, data)).entities
    assert dict(plain.properties) == {
        "dead_lettering_on_message_expiration": False,
        "default_message_time_to_live": 60 * MIN,
        "duplicate_detection_history_time_window": _dt.timedelta(seconds=20),
        "forward_dead_lettered_messages_to": None, "forward_to": None,
        "lock_duration": MIN, "max_delivery_count": 3,
        "requires_duplicate_detection": False, "requires_session": False,
    }
    assert long.properties["default_message_time_to_live"] == _dt.timedelta(days=14)
    assert long.properties["max_delivery_count"] == 2000  # Microsoft's 1-10 is not applied


def test_files_shaped_like_the_published_examples_load_unchanged(tmp_path):
    """The repository's examples: one without Topics, and its documentation's, with
    ``//`` comments in a correlation filter and subscriptions without rules."""
    queues_only = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": "background-task", "Properties": {
            "DeadLetteringOnMessageExpiration": False, "DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT20S", "ForwardDeadLetteredMessagesTo": "",
            "ForwardTo": "", "LockDuration": "PT1M", "MaxDeliveryCount": 3,
            "RequiresDuplicateDetection": False, "RequiresSession": False}},
    ]}], "Logging": {"Type": "File"}}}
    assert [e.name for e in msconfig.load(write(tmp_path, queues_only)).entities] == [
        "background-task"]
    commented = tmp_path / "commented.json"
    commented.write_text("""{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [],
        "Topics": [
          {
            "Name": "topic.1",
            "Subscriptions": [
              {
                "Name": "subscription.1",
                "Rules": [
                  {
                    "Name": "app-prop-filter-1",
                    "Properties": {
                      "FilterType": "Correlation",
                      "CorrelationFilter": {
                        "ContentType": "application/json"
                        // Other supported properties
                        // "CorrelationId": "id1",
                      }
                    }
                  }
                ]
              },
              { "Name": "subscription.3" /* no rules: takes everything */ }
            ]
          }
        ]
      }
    ],
    "Logging": { "Type": "File" }
  }
}""")
    config = msconfig.load(commented)
    assert [e.path for e in config.entities] == [
        "topic.1", "topic.1/subscriptions/subscription.1", "topic.1/subscriptions/subscription.3"]


def _broken(change: Any) -> Any:
    data = copy.deepcopy(EVERY_KEY)
    change(data["UserConfig"]["Namespaces"][0])
    return data


QUEUE0 = "UserConfig.Namespaces[0].Queues[0].Properties"
RULE = "UserConfig.Namespaces[0].Topics[0].Subscriptions[2].Rules[0].Properties"


@pytest.mark.parametrize(("change", "said"), [
    (lambda ns: ns["Queues"][0]["Properties"].update(LockDuration="PT1X"),
     f'{QUEUE0}.LockDuration: "PT1X" is not an ISO 8601 duration'),
    (lambda ns: ns["Queues"][0]["Properties"].update(LockDuration="P1M"),
     f'{QUEUE0}.LockDuration: "P1M" has years or months'),
    (lambda ns: ns["Queues"][0]["Properties"].update(LockDuration="PT0S"),
     f'{QUEUE0}.LockDuration: "PT0S" is no time at all'),
    (lambda ns: ns["Queues"][0]["Properties"].update(LockDuration="PT10M"),
     f"{QUEUE0}.LockDuration: lock_duration is 0:10:00; it must be between 0:00:05 and "
     "0:05:00"),
    (lambda ns: ns["Queues"][0]["Properties"].update(MaxDeliveryCount="3"),
     f'{QUEUE0}.MaxDeliveryCount: "3" is not a whole number'),
    (lambda ns: ns["Queues"][0]["Properties"].update(RequiresSession="yes"),
     f'{QUEUE0}.RequiresSession: "yes" is not true or false'),
    (lambda ns: ns["Queues"][0]["Properties"].update(LockDurration="PT1M"),
     f"{QUEUE0}.LockDurration: is not a key of {QUEUE0}; did you mean 'LockDuration'?"),
    (lambda ns: ns["Queues"][0].update(Name="bad name!"),
     "UserConfig.Namespaces[0].Queues[0].Name: queue name 'bad name!' is not valid"),
    (lambda ns: ns["Queues"].append({"Name": "ORDERS"}),
     "UserConfig.Namespaces[0].Queues[3].Name: 'ORDERS' is given twice (first at "
     "UserConfig.Namespaces[0].Queues[0].Name); Service Bus compares names without case"),
    (lambda ns: ns["Topics"][0]["Subscriptions"][2]["Rules"][0]["Properties"].update(
        FilterType="Regex"), f'{RULE}.FilterType: "Regex" is not Correlation or Sql'),
    (lambda ns: ns["Topics"][0]["Subscriptions"][2]["Rules"][0]["Properties"].update(
        SqlFilter={"SqlExpression": "qty >"}), f"{RULE}: "),
    (lambda ns: ns["Topics"][0]["Subscriptions"][2]["Rules"][0]["Properties"].pop("SqlFilter"),
     f"{RULE}: FilterType is Sql but it has no SqlFilter"),
    (lambda ns: ns["Topics"][0]["Subscriptions"][1]["Rules"][0]["Properties"].update(
        CorrelationFilter={}), "CorrelationFilter: is empty"),
    (lambda ns: ns["Topics"][0].update(Subscriptions={}),
     "UserConfig.Namespaces[0].Topics[0].Subscriptions: must be a JSON array, not an object"),
    (lambda ns: ns.pop("Name"), "UserConfig.Namespaces[0]: has no 'Name'"),
], ids=["duration", "months", "zero", "range", "count", "bool", "misspelt", "name", "twice",
        "filter-type", "sql", "no-sql", "empty-correlation", "array", "no-name"])
def test_a_bad_file_gets_one_sentence_naming_its_json_path(tmp_path, change, said):
    with pytest.raises(msconfig.ConfigError) as caught:
        msconfig.load(write(tmp_path, _broken(change)))
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_json_or_not_one_namespace_is_said(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"UserConfig": {"Namespaces": [}')
    with pytest.raises(msconfig.ConfigError, match=r"^not JSON at line 1, column 32"):
        msconfig.load(bad)
    two = copy.deepcopy(EVERY_KEY)
    two["UserConfig"]["Namespaces"].append(copy.deepcopy(two["UserConfig"]["Namespaces"][0]))
    with pytest.raises(msconfig.ConfigError, match="has 2 namespaces"):
        msconfig.load(write(tmp_path, two))
    with pytest.raises(msconfig.ConfigError, match="cannot be read"):
        msconfig.load(tmp_path / "missing.json")


def test_a_duplicate_window_shorter_than_service_bus_allows_is_raised_and_said(tmp_path):
    """Microsoft's emulator takes 5 s; Service Bus's shortest is 20 s."""
    data = copy.deepcopy(EVERY_KEY)
    topic = data["UserConfig"]["Namespaces"][0]["Topics"][0]
    config = msconfig.load(write(tmp_path, data))
    assert topic["Properties"]["DuplicateDetectionHistoryTimeWindow"] == "PT5S"
    (events,) = [e for e in config.entities if e.name == "events.v1"]
    assert events.properties["duplicate_detection_history_time_window"] == 20 * SECOND
    assert config.warnings == (
        "UserConfig.Namespaces[0].Topics[0].Properties.DuplicateDetectionHistoryTimeWindow: "
        "PT5S is below Service Bus's 20 s minimum (Microsoft's emulator allows it): PT20S "
        "is used.",)


def test_an_unknown_key_is_reported_not_silently_ignored(tmp_path):
    data = copy.deepcopy(EVERY_KEY)
    data["UserConfig"]["Namespaces"][0]["Queues"][1]["Comment"] = "kept for people"
    config = msconfig.load(write(tmp_path, data))
    assert config.warnings[0] == (
        "UserConfig.Namespaces[0].Queues[1].Comment: not a key Microsoft's schema knows "
        "here, ignored (known: Name, Properties).")


def test_the_command_stops_on_a_bad_file_before_it_listens_without_a_traceback(tmp_path):
    data = _broken(lambda ns: ns["Queues"][0]["Properties"].update(LockDuration="PT1X"))
    path = write(tmp_path, data)
    done = subprocess.run(
        [sys.executable, "-m", "aiosb.cli", "serve", "--config", str(path), "--port", "0",
         "--amqp-port", "0", "--amqps-port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f'aiosb: {path}: {QUEUE0}.LockDuration: "PT1X" is not an ISO 8601 duration '
        "(such as PT1H, PT20S or P14D).")
    assert "listening" not in done.stdout and "Traceback" not in done.stderr


# -- aiosb serve --config --microsoft-emulator, through the official clients -------------


def _health(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as answer:
        return answer.status, json.loads(answer.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    folder = tmp_path_factory.mktemp("msconfig")
    path = write(folder, EVERY_KEY)
    with ServerProcess(args=["--microsoft-emulator", "--config", str(path), "--tls-dir",
                             str(folder / "tls")]) as server:
        yield server, folder


def _ms_string(server: ServerProcess, key: str = "SAS_KEY_VALUE") -> str:
    """The connection string as Microsoft's documentation writes it, at this port."""
    port = server.amqp_connection_string.split("localhost:", 1)[1].split(";", 1)[0]
    return (f"Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true;")


def test_the_administration_client_sees_every_entity_and_rule_as_the_file_says(served):
    from azure.servicebus.management import (
        ServiceBusAdministrationClient,
    )
    from azure.servicebus.management import (
        SqlRuleFilter as SdkSql,
    )

    server, _ = served
    assert "Config.json: 8 created, 0 updated, 0 as they were" in server.banner
    admin = ServiceBusAdministrationClient.from_connection_string(
        _ms_string(server), connection_verify=server.certificate)
    with admin:
        orders = admin.get_queue("orders")
        assert (orders.lock_duration, orders.max_delivery_count) == (_dt.timedelta(seconds=30), 7)
        assert orders.default_message_time_to_live == _dt.timedelta(days=2, hours=3)
        assert orders.duplicate_detection_history_time_window == 2 * MIN
        assert orders.requires_session and orders.requires_duplicate_detection
        assert orders.dead_lettering_on_message_expiration
        assert orders.forward_dead_lettered_messages_to.endswith("graveyard")
        assert admin.get_queue("relay").forward_to.endswith("graveyard")
        assert admin.get_queue("graveyard").max_delivery_count == 3  # Microsoft's default
        topic = admin.get_topic("events.v1")
        assert topic.requires_duplicate_detection
        assert topic.default_message_time_to_live == 10 * MIN
        sub = admin.get_subscription("events.v1", "by-headers")
        assert (sub.lock_duration, sub.max_delivery_count) == (2 * MIN, 5)
        assert admin.get_subscription("events.v1", "everything").max_delivery_count == 4
        (rule,) = admin.list_rules("events.v1", "by-headers")
        assert rule.name == "every-header"
        assert rule.filter.properties == {"region": "eu", "tier": 2}
        assert (rule.filter.label, rule.filter.session_id, rule.filter.to) == (
            "subject-1", "s-1", "someone")
        (big,) = admin.list_rules("events.v1", "by-sql")
        assert isinstance(big.filter, SdkSql) and big.filter.sql_expression == "qty > 10"
        assert big.action.sql_expression == "SET sys.Label = 'big'"
        assert [r.name for r in admin.list_rules("events.v1", "everything")] == ["$Default"]


def test_the_microsoft_connection_string_sends_and_receives_and_rules_route(served):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    server, _ = served
    with ServiceBusClient.from_connection_string(_ms_string(server)) as client:
        with client.get_topic_sender("events.v1") as sender:
            sender.send_messages([
                ServiceBusMessage("eu", application_properties={"region": "eu", "qty": 1},
                                  message_id="a"),
                ServiceBusMessage("big", application_properties={"region": "us", "qty": 50},
                                  message_id="b"),
            ])
        got = {}
        for sub in ("by-property", "by-sql"):
            with client.get_subscription_receiver("events.v1", sub, max_wait_time=5) as r:
                msgs = r.receive_messages(max_message_count=5, max_wait_time=5)
                for m in msgs:
                    r.complete_message(m)
                got[sub] = [(str(m), m.subject) for m in msgs]
    assert got == {"by-property": [("eu", None)], "by-sql": [("big", "big")]}


def test_health_answers_as_microsofts_does(served):
    server, _ = served
    assert _health(server.url) == (200, {"status": "healthy", "message": "Service is healthy."})


def test_microsofts_key_is_refused_where_the_server_does_not_run_as_its_emulator(tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import ServiceBusAuthenticationError

    with ServerProcess(args=["--tls-dir", str(tmp_path)]) as server:
        with ServiceBusClient.from_connection_string(_ms_string(server), retry_total=0) as client:
            with pytest.raises(ServiceBusAuthenticationError), \
                    client.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("x"))
        with pytest.raises(urllib.error.HTTPError):  # no /health: a namespace path there
            _health(server.url)


def test_a_restart_with_a_changed_file_updates_and_says_so_and_keeps_messages(tmp_path):
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    data = copy.deepcopy(EVERY_KEY)
    path = write(tmp_path, data)
    args = ["--microsoft-emulator", "--config", str(path), "--data-dir", str(tmp_path / "data"),
            "--tls-dir", str(tmp_path / "tls")]
    with ServerProcess(args=args) as server:
        with ServiceBusClient.from_connection_string(_ms_string(server)) as client, \
                client.get_queue_sender("graveyard") as sender:
            sender.send_messages(ServiceBusMessage("kept"))
    queues = data["UserConfig"]["Namespaces"][0]["Queues"]
    queues[1]["Properties"] = {"LockDuration": "PT45S"}
    queues.append({"Name": "added"})
    rules = data["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][2]["Rules"]
    rules[0]["Properties"]["SqlFilter"]["SqlExpression"] = "qty > 20"
    write(tmp_path, data)
    with ServerProcess(args=args) as server:
        assert "updated queue graveyard: lock_duration 0:01:00 -> 0:00:45" in server.banner
        assert "updated rule big of subscription events.v1/subscriptions/by-sql" in server.banner
        assert "Config.json: 1 created, 1 updated, 7 as they were" in server.banner
        with ServiceBusClient.from_connection_string(_ms_string(server)) as client, \
                client.get_queue_receiver("graveyard", max_wait_time=5) as receiver:
            (kept,) = receiver.receive_messages(max_wait_time=5)
            receiver.complete_message(kept)
        assert str(kept) == "kept"
    # Once more, unchanged: nothing is made twice.
    with ServerProcess(args=args) as server:
        assert "Config.json: 0 created, 0 updated, 9 as they were" in server.banner
    queues[0]["Properties"]["RequiresSession"] = False
    write(tmp_path, data)
    with pytest.raises(Exception, match=r"requires_session.*fixes at creation"):
        ServerProcess(args=args).start()




def test_microsofts_ports_and_its_connection_string_word_for_word(tmp_path):
    """``--microsoft-emulator`` on its own ports: AMQP 5672, HTTP 5300; the connection
    string of Microsoft's documentation, with no port, works unchanged."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    for _ in range(40):
        if port_free(5672) and port_free(5300):
            break
        time.sleep(0.5)
    else:
        pytest.skip("ports 5672 and 5300 are taken on this machine")
    data = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": "queue.1"}], "Topics": []}], "Logging": {"Type": "File"}}}
    cmd = [sys.executable, "-m", "aiosb.cli", "serve", "--microsoft-emulator", "--quiet",
           "--config", str(write(tmp_path, data)), "--tls-dir", str(tmp_path / "tls")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = _banner(proc)
        assert "listening on http://127.0.0.1:5300" in text, text
        assert "AMQP 1.0 (the official SDKs) on port 5672" in text
        assert "AMQP over TLS" not in text  # Microsoft's emulator has none
        assert _health("http://127.0.0.1:5300")[0] == 200
        microsoft = ("Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
                     "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;")
        assert microsoft in text
        with ServiceBusClient.from_connection_string(microsoft) as client:
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages(ServiceBusMessage("word for word"))
            with client.get_queue_receiver("queue.1", max_wait_time=5) as receiver:
                (got,) = receiver.receive_messages(max_wait_time=5)
                receiver.complete_message(got)
        assert str(got) == "word for word"
        # Management over plain HTTP on 5300, as the .NET SDK speaks it to Microsoft's
        # emulator (an Atom GET of the entity, signed with its key).
        from aiosb.auth import SasCredential

        url = "http://127.0.0.1:5300/queue.1?api-version=2021-05"
        token = SasCredential("RootManageSharedAccessKey", "SAS_KEY_VALUE").token(
            "http://127.0.0.1:5300/queue.1")
        request = urllib.request.Request(url, headers={"Authorization": token})
        with urllib.request.urlopen(request, timeout=10) as answer:
            entry = answer.read().decode()
        assert answer.status == 200 and "<QueueDescription" in entry and "queue.1" in entry
    finally:
        proc.terminate()
        proc.wait(10)


def _banner(proc: subprocess.Popen[str], *ends: str) -> str:
    """What ``aiosb serve`` printed up to a line holding one of ``ends`` (its last line
    of the banner by default)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if any(end in line for end in ends or ("python: aiosb.connect(",)):
            break
    return "".join(lines)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_microsofts_port_variables_move_its_ports(tmp_path):
    """Microsoft's emulator listens where ``EMULATOR_HTTP_PORT`` and ``EMULATOR_AMQP_PORT``
    say (its compose file passes them to the container); so does ``--microsoft-emulator``,
    and the connection string it prints carries the moved AMQP port, as Microsoft's README
    writes it (``sb://localhost:5674``). The official SDK sends and receives through it."""
    import os

    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    http, amqp = _free_port(), _free_port()
    data = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
        {"Name": "queue.1"}], "Topics": []}], "Logging": {"Type": "File"}}}
    cmd = [sys.executable, "-m", "aiosb.cli", "serve", "--microsoft-emulator", "--quiet",
           "--config", str(write(tmp_path, data)), "--tls-dir", str(tmp_path / "tls")]
    env = {**os.environ, "EMULATOR_HTTP_PORT": str(http), "EMULATOR_AMQP_PORT": str(amqp)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        text = _banner(proc)
        assert f"listening on http://127.0.0.1:{http}" in text, text
        assert f"AMQP 1.0 (the official SDKs) on port {amqp}" in text, text
        assert _health(f"http://127.0.0.1:{http}")[0] == 200
        microsoft = (f"Endpoint=sb://localhost:{amqp};SharedAccessKeyName="
                     "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
                     "UseDevelopmentEmulator=true;")
        assert microsoft in text, text
        with ServiceBusClient.from_connection_string(microsoft) as client:
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages(ServiceBusMessage("moved"))
            with client.get_queue_receiver("queue.1", max_wait_time=5) as receiver:
                (got,) = receiver.receive_messages(max_wait_time=5)
                receiver.complete_message(got)
        assert str(got) == "moved"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("value", ["abc", "0", "70000", "-5"])
def test_a_port_variable_that_is_no_port_is_refused_by_name(value):
    """A bad ``EMULATOR_*_PORT`` is refused before anything listens, naming the variable
    (it is not silently replaced by the default)."""
    import os

    env = {**os.environ, "EMULATOR_AMQP_PORT": value}
    done = subprocess.run([sys.executable, "-m", "aiosb.cli", "serve", "--microsoft-emulator",
                           "--port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"EMULATOR_AMQP_PORT={value!r} in the environment is not a port" in done.stderr


def test_port_variables_are_only_microsofts_and_flags_win(tmp_path):
    """Without ``--microsoft-emulator`` the variables mean nothing to ``aiosb serve``; with
    it, ``--port`` and ``--amqp-port`` win over them (a variable a flag overrides is not
    read at all)."""
    import os

    from aiosb.server.config import port_variable as _port_variable

    assert _port_variable({}, "EMULATOR_HTTP_PORT", 5300) == 5300
    assert _port_variable({"EMULATOR_HTTP_PORT": " 5301 "}, "EMULATOR_HTTP_PORT", 5300) == 5301
    env = {**os.environ, "EMULATOR_HTTP_PORT": "not a port", "EMULATOR_AMQP_PORT": "x"}
    for extra in ([], ["--microsoft-emulator"]):
        http, amqp = _free_port(), _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "aiosb.cli", "serve", "--quiet", "--port", str(http),
             "--amqp-port", str(amqp), "--amqps-port", "0", "--tls-dir", str(tmp_path / "tls"),
             *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            text = _banner(proc, "AMQP 1.0 (the official SDKs)", "error")
            assert f"listening on http://127.0.0.1:{http}" in text, text
            assert f"on port {amqp}" in text, text
        finally:
            proc.terminate()
            proc.wait(10)
