"""#50: what a token put on ``$cbs`` allowed is remembered per entity and right (a check
per transfer cost the server more than the send), and only as long as it holds: not
past the token's expiry, and not once another token for the entity is put (one with
fewer rights may replace it)."""

from __future__ import annotations

import time

import pytest

from aiosb.auth import SasChecker, SasCredential, Unauthorized
from aiosb.server.amqp._cbs import Tokens

AUDIENCE = "sb://localhost/q1"
KEYS = {"all": ("a-key", frozenset({"Manage", "Send", "Listen"})),
        "listen": ("l-key", frozenset({"Listen"}))}


def token(name: str, expiry: float) -> str:
    return SasCredential(name, KEYS[name][0]).token(AUDIENCE, expiry=expiry)


def test_a_token_that_expires_mid_connection_allows_no_more(monkeypatch):
    now = time.time()
    tokens = Tokens(SasChecker(KEYS))
    tokens.put(AUDIENCE, token("all", now + 60), "localhost")
    tokens.check("q1", "Send")  # allowed, and remembered
    tokens.check("q1", "Send")
    monkeypatch.setattr(time, "time", lambda: now + 61)
    with pytest.raises(Unauthorized, match="expired"):
        tokens.check("q1", "Send")


def test_a_token_with_fewer_rights_put_in_place_of_one_with_more_is_what_counts():
    now = time.time()
    tokens = Tokens(SasChecker(KEYS))
    tokens.put(AUDIENCE, token("all", now + 600), "localhost")
    tokens.check("q1", "Send")
    tokens.put(AUDIENCE, token("listen", now + 600), "localhost")
    tokens.check("q1", "Listen")
    with pytest.raises(Unauthorized, match="needs Send"):
        tokens.check("q1", "Send")
