"""Claims-based security (``$cbs``): the tokens a connection put, and the check of a link
against them.

A client puts a ``SharedAccessSignature`` for an audience (``sb://host:port/q1``) on the
``$cbs`` node; every link it then attaches to an entity needs a put token whose audience
covers the entity, valid now, signed with a key holding the right the link needs
(``Send`` for a sender, ``Listen`` for a receiver): :class:`aiosb.auth.SasChecker` decides.

A connection that signed in with a key itself (SASL PLAIN, :mod:`._sasl`) has that key's
rights on every entity without a token; a token it puts adds to them. A token for an
entity that does not exist is refused with 404, as Service Bus refuses it (the SDKs raise
their authentication error from the link's open).
"""

from __future__ import annotations

import functools
import logging
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from ...auth import RIGHTS, SasChecker, hostname
from ...errors import EntityNotFound, Unauthorized

if TYPE_CHECKING:
    from ...emulator import EmulatorNamespace

__all__ = ["Tokens", "audience_path", "entity_of", "put_token_reply"]


@functools.lru_cache(maxsize=4096)
def audience_path(audience: str) -> str:
    """The entity path (``/q1``, lower case) an audience or link address names (kept for
    the addresses seen last: a link's is read on every transfer)."""
    if "://" in audience:
        audience = urllib.parse.urlsplit(audience).path
    return "/" + audience.strip("/").lower()


_DLQ = "/$deadletterqueue"
_MANAGEMENT = "/$management"


def entity_of(address: str) -> tuple[str, str | None]:
    """The broker path and sub-queue a link address names (``amqps://host/q1``,
    ``.../t1/Subscriptions/s1``, ``.../q1/$DeadLetterQueue``)."""
    if "://" in address:
        address = urllib.parse.urlsplit(address).path
    path = address.strip("/")
    if path.lower().endswith(_DLQ):
        return path[: -len(_DLQ)], "deadletter"
    return path, None


_log = logging.getLogger("aiosb.server.amqp")


class Tokens:
    """The tokens one connection put, by audience path, and the key it signed in with."""

    def __init__(self, checker: SasChecker) -> None:
        self._checker = checker
        self._tokens: dict[str, tuple[str, str]] = {}  # path -> (host, token)
        #: The key the connection signed in with (SASL PLAIN): its name and rights.
        self.key: tuple[str, frozenset[str]] | None = None
        #: What :meth:`check` allowed, by entity and right: until when (epoch seconds,
        #: the expiry of the token that allowed it). Forgotten when a token is put.
        self._allowed: dict[tuple[str, str], float] = {}

    @property
    def signed_in(self) -> bool:
        """Whether the connection has a key (SASL PLAIN) or a token put that was good."""
        return self.key is not None or bool(self._tokens)

    def sign_in(self, key_name: str, key: str) -> None:
        """Give the connection the rights of ``key_name``, whose key ``key`` is.

        Raises:
            Unauthorized: The pair is not a key of the server's.
        """
        self.key = (key_name, self._checker.key_rights(key_name, key))

    def put(self, audience: str, token: str, host: str | None) -> None:
        """Keep ``token`` for ``audience`` if it is good for some right there.

        Raises:
            Unauthorized: The token is not signed by a known key, expired, or for
                another host or resource.
        """
        path, host = self.verify(audience, token, host)
        self._tokens[path] = (host, token)
        self._allowed.clear()  # the token it replaced may have allowed more

    def verify(self, audience: str, token: str, host: str | None) -> tuple[str, str]:
        """Check ``token`` for ``audience`` as :meth:`put` does, without keeping it;
        the audience's path and the host the token was checked for.

        Raises:
            Unauthorized: As :meth:`put`.
        """
        path = audience_path(audience)
        if "://" in audience:
            host = host or urllib.parse.urlsplit(audience).netloc
        host = hostname(host or "localhost")
        first: Unauthorized | None = None
        for right in RIGHTS:
            try:
                self._checker.check(token, host, path, right)
            except Unauthorized as exc:
                first = first or exc
                continue
            return path, host
        assert first is not None
        raise first

    def check(self, entity: str, needs: str) -> None:
        """Raise unless a token put on this connection lets a link to ``entity`` (a path
        or an address) do what ``needs`` (``Send``, ``Listen`` or ``Manage``) says.

        Raises:
            Unauthorized: No token covers the entity, or none is good for ``needs`` now,
                and the key the connection signed in with (if any) has not that right.
        """
        if self.key is not None and needs in self.key[1]:
            return
        until = self._allowed.get((entity, needs))
        if until is not None and time.time() < until:  # (#50: a check per transfer)
            return
        path = audience_path(entity)
        last: Unauthorized | None = None
        for scope, (host, token) in self._tokens.items():
            if scope != "/" and path != scope and not path.startswith(scope + "/"):
                continue
            try:
                expiry = self._checker.check(token, host, path, needs)
            except Unauthorized as exc:
                last = exc
            else:
                if len(self._allowed) >= 256:
                    self._allowed.clear()
                self._allowed[(entity, needs)] = expiry
                return
        if last is not None:
            raise last
        if self.key is not None:  # as a token signed with the key is refused
            name, rights = self.key
            raise Unauthorized(
                f"the key {name[:60]!r} this connection signed in with has "
                f"{', '.join(sorted(rights))} rights; this operation needs {needs}."
            )
        raise Unauthorized(
            f"no token was put on $cbs for {path!r}: put a SharedAccessSignature for it "
            "before attaching a link."
        )

    def any_right(self, entity: str) -> bool:
        """Whether a token put on this connection covers ``entity`` for some right."""
        for right in RIGHTS:
            try:
                self.check(entity, right)
                return True
            except Unauthorized:
                continue
        return False


def put_token_reply(request: dict[Any, Any], token: Any, tokens: Tokens,
                    host: str | None, ns: EmulatorNamespace) -> tuple[int, str]:
    """The status code and description answering a ``$cbs`` request (its application
    properties and body): 200, 400 for a request that is not a put-token, 401 for a
    token that is no good, 404 for one whose audience names an entity that does not
    exist (checked after the token: who holds no key learns nothing of the entities).
    A refusal is logged (the server's log says why a client's link never opened)."""
    status, description = _put_token(request, token, tokens, host, ns)
    if status != 200:
        _log.info("AMQP: refused a token for %s: %d %s", request.get("name"), status,
                  description)
    return status, description


def _put_token(request: dict[Any, Any], token: Any, tokens: Tokens,
               host: str | None, ns: EmulatorNamespace) -> tuple[int, str]:
    operation = request.get("operation")
    if operation != "put-token":
        return 400, f"the $cbs node does only put-token, not {operation!r}."
    audience = request.get("name")
    if not isinstance(audience, str) or not isinstance(token, str):
        return 400, "put-token needs a name (the audience) and a token (the body)."
    try:
        tokens.verify(audience, token, host)
    except Unauthorized as exc:
        return 401, exc.message
    path, _ = entity_of(audience)
    if path.lower().endswith(_MANAGEMENT):
        path, _ = entity_of(path[: -len(_MANAGEMENT)])
    if path:
        try:
            ns.lookup(path)
        except EntityNotFound as exc:
            return 404, exc.message
    tokens.put(audience, token, host)
    return 200, "OK"
