"""Shared access signatures and connection strings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

import pytest

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
