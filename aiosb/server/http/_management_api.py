"""The management API of the server: entities as Atom entries and feeds (create, read
with counts, update, delete, list in pages), in the encoding of :mod:`aiosb.wire.atom`."""


from __future__ import annotations

from typing import Any

from aiohttp import web

from ...emulator import EmulatorNamespace
from ...entities import DEAD_LETTER_SUFFIX, parse_entity_path
from ...errors import (
    EntityNotFound,
    InvalidArgument,
    InvalidOperation,
)
from ...protocol import EntityKind, ManageAction, ManagementRequest, entity_kind
from ...rules import split_rule_path
from ...wire import atom as _atom
from ...wire.atom import API_VERSION, namespace_info_xml
from ...wire.atom_rules import default_rule_of, parse_rule, rule_entry_xml, rules_feed_xml
from ._requests import (
    Route,
    page_of,
)


async def manage(
    request: web.Request, ns: EmulatorNamespace, route: Route
) -> web.StreamResponse:
    segs = route.segments
    method = request.method
    url = f"{request.scheme}://{request.host}{route.base}"
    if segs[0] == "$Resources":
        if method != "GET" or len(segs) != 2 or segs[1].lower() not in ("queues", "topics"):
            raise InvalidArgument("use GET /{namespace}/$Resources/queues (or topics).")
        kind = entity_kind(segs[1].lower()[:-1])
        page = page_of(request)  # a bad $skip is a 400 whatever the listing
        items = await ns.manage(ManagementRequest("list", kind))
        return await _feed(request, ns, kind, items, page, f"{url}/$Resources/{segs[1]}",
                           segs[1].capitalize(), url)
    path = "/".join(segs)
    if [s.lower() for s in segs] == ["$namespaceinfo"]:
        if method != "GET":
            raise InvalidOperation("GET $namespaceinfo reads the namespace's properties.")
        return _atom_response(namespace_info_xml(ns.name, ns.tier, f"{url}/$namespaceinfo"))
    if _is_rules(segs):
        return await _rules(request, ns, path, url)
    if method == "GET" and segs[-1].lower() == "subscriptions" and len(segs) > 1:
        topic = "/".join(segs[:-1])
        page = page_of(request)
        items = await ns.manage(ManagementRequest("list", "subscription", topic))
        return await _feed(request, ns, "subscription", items, page, f"{url}/{path}",
                           "Subscriptions", url)
    parsed = parse_entity_path(path)
    if parsed.sub_queue is not None:
        raise InvalidOperation(
            f"{DEAD_LETTER_SUFFIX} is a sub-queue, not an entity: manage {parsed.path!r}."
        )
    if method == "PUT":
        return await _put(request, ns, parsed, url)
    wanted = request.headers.get("x-aiosb-kind")
    if wanted is not None and wanted not in _atom.KINDS:
        raise InvalidArgument(f"x-aiosb-kind is {wanted[:40]!r}; use queue, topic or "
                              "subscription.")
    kind = await _kind_of(ns, parsed, wanted)
    if method == "GET":
        props = await ns.manage(ManagementRequest("get", kind, parsed.path))
        counts = await ns.manage(ManagementRequest("runtime", None, parsed.path))
        return _entry(request, kind, props, counts, f"{url}/{_shown(parsed.path)}",
                      parsed.path, status=200)
    if method == "DELETE":
        await ns.manage(ManagementRequest("delete", kind, parsed.path))
        return web.Response(status=200)
    raise InvalidOperation(f"{method} is not allowed on an entity: use PUT, GET or DELETE.")


async def _kind_of(ns: EmulatorNamespace, parsed: Any, wanted: str | None) -> EntityKind:
    if parsed.subscription is not None:
        kind: EntityKind = "subscription"
        if wanted not in (None, kind):
            raise EntityNotFound(f"{parsed.path!r} is not a {wanted}.")
        return kind
    kinds: tuple[EntityKind, ...] = ("queue", "topic") if wanted is None else (entity_kind(wanted),)
    for kind in kinds:
        try:
            await ns.manage(ManagementRequest("get", kind, parsed.path))
        except EntityNotFound:
            continue
        return kind
    what = wanted or "queue or topic"
    raise EntityNotFound(f"The {what} {parsed.path!r} does not exist in namespace "
                         f"{ns.name!r}.")


async def _put(request: web.Request, ns: EmulatorNamespace, parsed: Any, url: str
               ) -> web.StreamResponse:
    body = await request.read()
    entry = _atom.parse_entry(body)
    kind = entity_kind(entry.kind)
    version = _version(request)
    too_new = [element for element, field, _ in _atom.KINDS[kind][1]
               if field in entry.fields and _atom.SINCE.get(element, "") > version]
    if too_new:  # Service Bus refuses them (#47)
        raise InvalidArgument(f"{', '.join(too_new)} came with api-version {version}; "
                              f"it is part of api-version {_atom.SINCE[too_new[0]]} and later.")
    if (kind == "subscription") != (parsed.subscription is not None):
        raise InvalidArgument(
            f"a {kind} description was PUT at {parsed.path!r}; subscriptions live at "
            "{topic}/subscriptions/{name}, queues and topics anywhere else."
        )
    for readonly in ("created_at_utc", "updated_at_utc", "accessed_at_utc"):
        entry.fields.pop(readonly, None)
    if kind == "subscription":
        props = _atom.build_properties(kind, parsed.subscription, entry.fields,
                                       topic_name=parsed.entity)
    else:
        props = _atom.build_properties(kind, parsed.path, entry.fields)
    update = request.headers.get("If-Match") is not None
    if update and request.headers.get("If-Match", "").strip() != "*":
        raise InvalidArgument("If-Match must be '*' to update an entity.")
    action: ManageAction = "update" if update else "create"
    # A subscription made with <DefaultRuleDescription> has that rule, not $Default.
    first = default_rule_of(body) if kind == "subscription" and not update else None
    result = await ns.manage(ManagementRequest(action, kind, parsed.path, props, first))
    return _entry(request, kind, result, None, f"{url}/{_shown(parsed.path)}", parsed.path,
                  status=200 if update else 201)


def _version(request: web.Request) -> str:
    """The api-version a request asks for (aiosb's own, 2021-05, when it names none)."""
    return request.query.get("api-version") or API_VERSION


def _entry(request: web.Request, kind: str, props: Any, counts: Any, url: str, title: str,
           *, status: int) -> web.Response:
    """An entity's entry, in the elements of the request's api-version, its forwarding
    targets as addresses on the request's host (as Service Bus answers)."""
    return web.Response(
        status=status,
        body=_atom.entry_xml(kind, _atom.addressed(props, request.host), counts, url, title,
                             _version(request)),
        content_type="application/atom+xml",
        charset="utf-8",
    )


async def _feed(request: web.Request, ns: EmulatorNamespace, kind: str, items: list[Any],
                page: slice, url: str, title: str, base: str) -> web.Response:
    """A page of a listing, each entry with its counts (as Service Bus lists them), and
    a ``next`` link while more remain (what the official clients follow)."""
    entries = []
    for props in items[page]:
        path = props.name if kind != "subscription" else (
            f"{props.topic_name}/subscriptions/{props.name}"
        )
        counts = await ns.manage(ManagementRequest("runtime", None, path))
        entries.append((kind, _atom.addressed(props, request.host), counts,
                        f"{base}/{_shown(path)}", props.name))
    following = _next_page(url, page, len(items))
    return web.Response(
        body=_atom.feed_xml(entries, url, title, following, _version(request)),
        content_type="application/atom+xml",
        charset="utf-8",
    )


def _next_page(url: str, page: slice, total: int) -> str | None:
    """The address of the page after ``page`` of a listing of ``total``, if any."""
    if page.stop >= total:
        return None
    return f"{url}?$skip={page.stop}&$top={page.stop - page.start}&api-version={API_VERSION}"


def _is_rules(segs: tuple[str, ...]) -> bool:
    """Whether the path names a rule (``.../subscriptions/S/rules/R``) or the rules of a
    subscription (``.../subscriptions/S/rules``)."""
    lower = [s.lower() for s in segs]
    return (len(lower) >= 5 and lower[-4] == "subscriptions" and lower[-2] == "rules") or (
        len(lower) >= 4 and lower[-3] == "subscriptions" and lower[-1] == "rules"
    )


async def _rules(
    request: web.Request, ns: EmulatorNamespace, path: str, url: str
) -> web.StreamResponse:
    """The Atom rules routes: list, read, create, update and delete a rule."""
    method = request.method
    _, name = split_rule_path(path)
    if name is None:
        if method != "GET":
            raise InvalidOperation(f"{method} is not allowed on a subscription's rules: GET "
                                   "lists them.")
        rules = await ns.manage(ManagementRequest("list", "rule", path))
        page = page_of(request)
        listing = f"{url}/{_shown(path)}"
        return _atom_response(rules_feed_xml(rules[page], listing,
                                             _next_page(listing, page, len(rules))))
    if method == "GET":
        found = await ns.manage(ManagementRequest("get", "rule", path))
        return _atom_response(rule_entry_xml(found, f"{url}/{_shown(path)}"))
    if method == "DELETE":
        await ns.manage(ManagementRequest("delete", "rule", path))
        return web.Response(status=200)
    if method != "PUT":
        raise InvalidOperation(f"{method} is not allowed on a rule: use PUT, GET or DELETE.")
    rule = parse_rule(await request.read())
    rule.name = name  # the URL names the rule
    update = request.headers.get("If-Match") is not None
    if update and request.headers.get("If-Match", "").strip() != "*":
        raise InvalidArgument("If-Match must be '*' to update a rule.")
    action: ManageAction = "update" if update else "create"
    made = await ns.manage(ManagementRequest(action, "rule", path, rule))
    return _atom_response(rule_entry_xml(made, f"{url}/{_shown(path)}"),
                          200 if update else 201)


def _atom_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=body, content_type="application/atom+xml", charset="utf-8"
    )


def _shown(path: str) -> str:
    """An entity path as Service Bus writes it in an entry's id and links:
    ``topic/Subscriptions/sub/Rules/rule`` (the JavaScript client reads names from there,
    in that capitalisation)."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if i and part.lower() == "subscriptions" and i + 1 < len(parts):
            parts[i] = "Subscriptions"
        elif i > 2 and part.lower() == "rules" and parts[i - 2] == "Subscriptions":
            parts[i] = "Rules"
    return "/".join(parts)
