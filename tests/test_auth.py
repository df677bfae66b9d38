"""Shared access signatures and connection strings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

import pytest

import aiosb
from aiosb import SasCredential, errors
from aiosb.auth import parse_connection_string


def test_token_has_the_service_bus_shape_and_a_verifiable_signature():
    cred = SasCredential("RootManageSharedAccessKey", "c2VjcmV0")
    token = cred.token("https://Contoso.servicebus.windows.net/orders", expiry=1_900_000_000)
    assert token.startswith("SharedAccessSignature ")
    fields = dict(p.split("=", 1) for p in token.removeprefix("SharedAccessSignature ").split("&"))
    assert set(fields) == {"sr", "sig", "se", "skn"}
    assert fields["se"] == "1900000000" and fields["skn"] == "RootManageSharedAccessKey"
    sr = fields["sr"]
    assert urllib.parse.unquote(sr) == "https://contoso.servicebus.windows.net/orders"
    expected = base64.b64encode(
        hmac.new(b"c2VjcmV0", f"{sr}\n1900000000".encode(), hashlib.sha256).digest()
    ).decode()
    assert urllib.parse.unquote(fields["sig"]) == expected


def test_credential_needs_a_name_and_a_key_and_hides_the_key():
    with pytest.raises(errors.InvalidArgument):
        SasCredential("", "k")
    with pytest.raises(errors.InvalidArgument, match="empty key"):
        SasCredential("name", "")
    assert "secret" not in repr(SasCredential("name", "secret"))


def test_connection_string_parts():
    parts = parse_connection_string(
        "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;"
        "SharedAccessKey=abc=;"
    )
    assert parts == {
        "Endpoint": "sb://contoso.servicebus.windows.net/",
        "SharedAccessKeyName": "Root",
        "SharedAccessKey": "abc=",
    }
    with pytest.raises(errors.InvalidArgument, match="Endpoint"):
        parse_connection_string("SharedAccessKeyName=Root")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        # Each of these once fell back to the emulator's full-rights development key.
        ("Endpoint=http://127.0.0.1:5380/x/;SharedAccessKeyName=Sender",
         "gives SharedAccessKeyName but no SharedAccessKey"),
        ("Endpoint=http://127.0.0.1:5380/x/;SharedAccessKey=abc=",
         "gives SharedAccessKey but no SharedAccessKeyName"),
        ("Endpoint=http://127.0.0.1:5380/x/;SharedAccessKeyName=Root;SharedAcessKey=typo=",
         "part 'SharedAcessKey': did you mean SharedAccessKey"),
        ("Endpoint=sb://c.servicebus.windows.net/;SharedAccesKeyName=Root;SharedAccessKey=k=",
         "did you mean SharedAccessKeyName"),
        ("Endpoint=http://127.0.0.1:5380/x/;SharedAccessKeyName=;SharedAccessKey=k=",
         "SharedAccessKeyName is empty"),
        ("Endpoint=sb://a.servicebus.windows.net/;endpoint=sb://b.servicebus.windows.net/",
         "gives Endpoint twice"),
        ("Endpoint=http://127.0.0.1:5380/x/;SharedAccessSignature=SharedAccessSignature sr=x",
         "not a SharedAccessSignature"),
    ],
)
def test_connection_strings_with_half_a_key_or_a_misspelt_part_are_refused(text, match):
    """R-7: a misspelt or missing part is an error, not a silent default credential."""
    if "SharedAccessSignature" in text:  # a valid string; only the HTTP transport refuses it
        with pytest.raises(errors.InvalidArgument, match=match):
            aiosb.connect(text)
        return
    with pytest.raises(errors.InvalidArgument, match=match):
        parse_connection_string(text)
    with pytest.raises(errors.InvalidArgument, match=match):
        aiosb.connect(text)


def test_parts_other_tools_add_are_kept_and_play_no_part():
    """What .NET, Functions and IoT configurations carry (the SDK ignores them too); a
    HostName stands for a missing Endpoint; the parts come in any order."""
    parts = parse_connection_string(
        "TransportType=Amqp;HostName=contoso.servicebus.windows.net;OperationTimeout=30;"
        "SharedAccessKeyName=Root;SharedAccessKey=abc="
    )
    assert parts["Endpoint"] == "sb://contoso.servicebus.windows.net"
    assert parts["TransportType"] == "Amqp"
    ns = aiosb.connect("SharedAccessKeyName=Root;SharedAccessKey=abc=;"
                       "Endpoint=sb://contoso.servicebus.windows.net/;TransportType=Amqp")
    assert ns.name == "contoso"


def test_connection_string_parts_are_named_whatever_their_case():
    """The SDKs read part names without regard to case; so does aiosb."""
    parts = parse_connection_string(
        "endpoint=sb://contoso.servicebus.windows.net/;sharedaccesskeyname=Root;"
        "SHAREDACCESSKEY=abc=;UseDevelopmentEmulator=true"
    )
    assert parts == {
        "Endpoint": "sb://contoso.servicebus.windows.net/",
        "SharedAccessKeyName": "Root",
        "SharedAccessKey": "abc=",
        "UseDevelopmentEmulator": "true",
    }


@pytest.mark.parametrize(
    ("credential", "match"),
    [("justakey", "not a bare key"), (("Root",), r"two strings; not \(str\)"),
     (("Root", None), r"not \(str, NoneType\)"),
     (42, "not int")],
)
def test_a_credential_that_cannot_sign_is_refused_at_connect(credential, match):
    with pytest.raises(errors.InvalidArgument, match=match):
        aiosb.connect("https://contoso.servicebus.windows.net", credential=credential)


async def test_what_the_sdk_refuses_in_a_connection_string_is_an_aiosb_error():
    """Every error is a ServiceBusError: the SDK's ValueError arrives as InvalidArgument."""
    ns = aiosb.connect(
        "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=Root;"
        "SharedAccessKey=abc=;SharedAccessSignature=sig"
    )
    with pytest.raises(errors.InvalidArgument, match="SDK cannot use it: Only one"):
        await ns.open()
