"""The HTTP transport's management: entities and rules over the Service Bus Atom
protocol (:class:`HttpManagement`, a part of :class:`~aiosb.transport.http.HttpTransport`), and what
both halves share."""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from ...entities import _check_name
from ...errors import EntityNotFound, InvalidArgument, InvalidOperation
from ...protocol import ManagementRequest
from ...rules import RuleProperties
from ...wire import atom as _atom
from ...wire.atom_rules import parse_rule, parse_rules, rule_request_xml, with_default_rule

__all__ = ["HttpManagement"]

_PAGE = 100  # entries per page of a listing
_API_VERSION = {"api-version": "2021-05"}  # what the management protocol needs (as the SDK)
_ATOM = "application/atom+xml;type=entry;charset=utf-8"
NO_SESSIONS = (
    "Sessions are not part of the Service Bus REST protocol, so the HTTP transport cannot "
    "receive from a session; use memory:// or the AMQP transport (a connection string)."
)


@functools.lru_cache(maxsize=1024)
def quote(path: str) -> str:
    """``path`` quoted for a URL (remembered: a client addresses a few entities, each
    in every request, #16)."""
    return urllib.parse.quote(path, safe="/$")


class HttpManagement:
    """The management operations of the HTTP transport, over what it provides: signed
    requests (:meth:`_request`), the namespace name, and whether it talks to an
    ``aiosb serve`` server (its extensions name the entity kind a request means)."""

    namespace: str
    extensions: bool
    #: :meth:`~.HttpTransport._request`: a signed request; (status, headers, body).
    _request: Callable[..., Awaitable[tuple[int, Any, bytes]]]

    async def manage(self, request: ManagementRequest) -> Any:
        action, kind, path = request.action, request.kind, request.path
        if action == "sessions":
            raise InvalidOperation(NO_SESSIONS)
        if kind == "rule":
            return await self._rule(request)
        if action == "list":
            if kind == "subscription":
                where = f"{quote(path)}/subscriptions"
            else:
                where = f"$Resources/{kind}s"
            return [self._properties(e, kind, path, e.title or "")
                    for e in await self._list(where)]
        kind_header: dict[str, str] = {"x-aiosb-kind": kind} if self.extensions and kind else {}
        if action in ("get", "runtime"):
            _, _, body = await self._request(
                "GET", quote(path), headers=kind_header, params=_API_VERSION
            )
            entry = _atom.parse_feed(body)
            if not isinstance(entry, _atom.Entry) or (kind and entry.kind != kind):
                what = kind or "entity"
                raise EntityNotFound(
                    f"The {what} {path!r} does not exist in namespace {self.namespace!r}."
                )
            if action == "runtime":
                return _atom.runtime_properties(path, entry)
            return self._properties(entry, kind, path)
        if action == "delete":
            await self._request("DELETE", quote(path), headers=kind_header,
                                params=_API_VERSION)
            return None
        if action in ("create", "update"):
            props = request.properties
            if kind is None:
                raise InvalidArgument(f"{action} needs the entity kind.")
            _check_name(kind, props.name)  # before any request
            if kind == "subscription":
                _check_name("topic", props.topic_name)
            headers = {"Content-Type": _ATOM}
            if action == "update":
                headers["If-Match"] = "*"
            data = _atom.request_xml(kind, request.properties)
            if action == "create" and request.rule is not None:  # one request: atomic
                data = with_default_rule(data, request.rule)
            _, _, body = await self._request(
                "PUT",
                quote(path),
                data=data,
                headers=headers,
                params=_API_VERSION,
            )
            return self._properties(_atom.parse_entry(body), kind, path)
        raise InvalidArgument(f"unknown management action {action!r}.")

    async def _rule(self, request: ManagementRequest) -> Any:
        """A rule over the Atom rules routes (``.../subscriptions/S/rules[/R]``)."""
        action, where = request.action, quote(request.path)
        if action == "list":
            rules: list[RuleProperties] = []
            while True:
                _, _, body = await self._request("GET", where, params={
                    "$skip": str(len(rules)), "$top": str(_PAGE), **_API_VERSION,
                })
                page = parse_rules(body)
                known = {r.name.lower() for r in rules}
                new = [r for r in page if r.name.lower() not in known]
                rules.extend(new)
                if len(page) < _PAGE or not new:  # the last page (or $skip is ignored)
                    return rules
        if action == "get":
            _, _, body = await self._request("GET", where, params=_API_VERSION)
            return parse_rule(body)
        if action == "delete":
            await self._request("DELETE", where, params=_API_VERSION)
            return None
        if action in ("create", "update"):
            headers = {"Content-Type": _ATOM}
            if action == "update":
                headers["If-Match"] = "*"
            _, _, body = await self._request(
                "PUT", where, data=rule_request_xml(request.properties), headers=headers,
                params=_API_VERSION,
            )
            return parse_rule(body)
        raise InvalidArgument(f"unknown management action {action!r} for a rule.")

    async def _list(self, where: str) -> list[_atom.Entry]:
        """Every entry of a listing, a page of :data:`_PAGE` at a time (``$skip`` and
        ``$top``), as Service Bus gives at most 100 at once."""
        entries: list[_atom.Entry] = []
        seen: set[str] = set()
        while True:
            _, _, body = await self._request("GET", where, params={
                "$skip": str(len(entries)), "$top": str(_PAGE), **_API_VERSION,
            })
            page = _atom.parse_feed(body)
            if isinstance(page, _atom.Entry):
                page = [page]
            new = [e for e in page if (e.title or "").lower() not in seen]
            entries.extend(new)
            seen.update((e.title or "").lower() for e in new)
            if len(page) < _PAGE or not new:  # the last page (or $skip is not honoured)
                return entries

    @staticmethod
    def _properties(entry: _atom.Entry, kind: str | None, path: str, title: str = "") -> Any:
        if entry.kind == "subscription":
            if kind == "subscription" and title:  # a listing: path is the topic
                return _atom.build_properties("subscription", title, entry.fields,
                                              topic_name=path)
            topic, _, name = path.rpartition("/subscriptions/")
            return _atom.build_properties("subscription", name, entry.fields, topic_name=topic)
        return _atom.build_properties(entry.kind, title or path, entry.fields)
