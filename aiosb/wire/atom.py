"""The Atom XML of Service Bus management: entity descriptions, entries and feeds.

Both halves use it: the server (:mod:`aiosb.server.http`) to read what clients PUT
and to answer, the HTTP transport to write requests and read answers. Elements are
written in the order Service Bus's data-contract serializer expects (the order of the
azure-servicebus SDK's generated ``QueueDescription``, ``TopicDescription`` and
``SubscriptionDescription``); a PUT in another order is refused by real namespaces.

Parsing is safe for input from anyone: a document type declaration (and with it every
entity definition, the "billion laughs" and external entities) is refused outright,
documents are size-limited by the caller, and every value is checked.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any, NoReturn
from xml.parsers import expat as pyexpat
from xml.sax.saxutils import escape

from ..entities import (
    NEVER,
    QueueProperties,
    RuntimeProperties,
    SubscriptionProperties,
    TopicProperties,
    _duration,
    forward_target_name,
)
from ..errors import InvalidArgument
from .atom_access import access_xml, read_access

__all__ = [
    "Entry",
    "addressed",
    "entry_xml",
    "feed_xml",
    "namespace_info_xml",
    "parse_entry",
    "parse_feed",
    "read_runtime",
    "request_xml",
]

ATOM = "http://www.w3.org/2005/Atom"
#: The management protocol's version, as the official clients send it.
API_VERSION = "2021-05"
#: Elements newer than the oldest version (2017-04), and the version that brought each:
#: an answer has them only when its request asked for that version or a later one, and
#: a PUT of an older version may not set them (Service Bus refuses it, #47).
SINCE = {
    "MaxMessageSizeInKilobytes": "2021-05",
    "SqlFilterCount": "2024-05",
    "CorrelationFilterCount": "2024-05",
}
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
COUNTS_NS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
_NEVER_TEXT = "P10675199DT2H48M5.4775807S"
_MAX_DOCUMENT = 256 * 1024

# (element, field of the properties dataclass or None for read-only, type). A read-only
# element with a ``None`` field is written from the runtime counts, or not at all.
_C = "counts"
_ACCESS = "access"  # authorization rules (:mod:`aiosb.wire.atom_access`)
_QUEUE = [
    ("LockDuration", "lock_duration", "duration"),
    ("MaxSizeInMegabytes", "max_size_in_megabytes", "int"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_time_to_live", "duration"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_history_time_window",
     "duration"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("SizeInBytes", None, _C),
    ("MessageCount", None, _C),
    ("IsAnonymousAccessible", None, "ignored"),
    ("AuthorizationRules", "authorization_rules", _ACCESS),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "str"),
    ("UserMetadata", "user_metadata", "str"),
    ("CreatedAt", "created_at_utc", "datetime"),
    ("UpdatedAt", "updated_at_utc", "datetime"),
    ("AccessedAt", "accessed_at_utc", "datetime"),
    ("SupportOrdering", None, "ignored"),
    ("CountDetails", None, _C),
    ("AutoDeleteOnIdle", "auto_delete_on_idle", "duration"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("EntityAvailabilityStatus", None, "ignored"),
    ("EnableExpress", "enable_express", "bool"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "str"),
    ("MaxMessageSizeInKilobytes", "max_message_size_in_kilobytes", "int"),
]
_TOPIC = [
    ("DefaultMessageTimeToLive", "default_message_time_to_live", "duration"),
    ("MaxSizeInMegabytes", "max_size_in_megabytes", "int"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_history_time_window",
     "duration"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("SizeInBytes", None, _C),
    ("FilteringMessagesBeforePublishing", None, "ignored"),
    ("IsAnonymousAccessible", None, "ignored"),
    ("AuthorizationRules", "authorization_rules", _ACCESS),
    ("Status", "status", "str"),
    ("CreatedAt", "created_at_utc", "datetime"),
    ("UpdatedAt", "updated_at_utc", "datetime"),
    ("AccessedAt", "accessed_at_utc", "datetime"),
    ("SupportOrdering", "support_ordering", "bool"),
    ("CountDetails", None, _C),
    ("SubscriptionCount", None, _C),
    ("SqlFilterCount", None, _C),
    ("CorrelationFilterCount", None, _C),
    ("AutoDeleteOnIdle", "auto_delete_on_idle", "duration"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("EntityAvailabilityStatus", None, "ignored"),
    ("EnableSubscriptionPartitioning", None, "ignored"),
    ("EnableExpress", "enable_express", "bool"),
    ("UserMetadata", "user_metadata", "str"),
    ("MaxMessageSizeInKilobytes", "max_message_size_in_kilobytes", "int"),
]
_SUBSCRIPTION = [
    ("LockDuration", "lock_duration", "duration"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_time_to_live", "duration"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    ("DeadLetteringOnFilterEvaluationExceptions",
     "dead_lettering_on_filter_evaluation_exceptions", "bool"),
    ("DefaultRuleDescription", None, "ignored"),
    ("MessageCount", None, _C),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "str"),
    ("CreatedAt", "created_at_utc", "datetime"),
    ("UpdatedAt", "updated_at_utc", "datetime"),
    ("AccessedAt", "accessed_at_utc", "datetime"),
    ("CountDetails", None, _C),
    ("UserMetadata", "user_metadata", "str"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "str"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle", "duration"),
    ("EntityAvailabilityStatus", None, "ignored"),
]
KINDS: dict[str, tuple[str, list[tuple[str, str | None, str]], type]] = {
    "queue": ("QueueDescription", _QUEUE, QueueProperties),
    "topic": ("TopicDescription", _TOPIC, TopicProperties),
    "subscription": ("SubscriptionDescription", _SUBSCRIPTION, SubscriptionProperties),
}
_KIND_OF = {tag: kind for kind, (tag, _, _) in KINDS.items()}
#: A topic's counts, each an element of its own, and the RuntimeProperties field of each.
_COUNT_FIELDS = {
    "SubscriptionCount": "subscription_count",
    "SqlFilterCount": "sql_filter_count",
    "CorrelationFilterCount": "correlation_filter_count",
}
#: CountDetails children, in order, and the RuntimeProperties field of each. The last
#: three are aiosb additions (Service Bus does not report deferred messages or fragment
#: availability here; PT-14).
_COUNT_DETAILS = [
    ("ActiveMessageCount", "active_message_count"),
    ("DeadLetterMessageCount", "dead_letter_message_count"),
    ("ScheduledMessageCount", "scheduled_message_count"),
    ("TransferDeadLetterMessageCount", "transfer_dead_letter_message_count"),
    ("TransferMessageCount", "transfer_message_count"),
    ("DeferredMessageCount", "deferred_message_count"),
    ("FragmentCount", "fragment_count"),
    ("AvailableFragmentCount", "available_fragments"),
]
_DURATION = re.compile(
    r"P(?:(\d{1,9})D)?(?:T(?:(\d{1,9})H)?(?:(\d{1,9})M)?(?:(\d{1,12})(?:\.(\d{1,9}))?S)?)?"
)


# -- values ---------------------------------------------------------------------------


def format_duration(delta: _dt.timedelta) -> str:
    """ISO 8601 duration, as Service Bus writes it (``TimeSpan.MaxValue`` for never)."""
    if delta >= NEVER:
        return _NEVER_TEXT
    total_us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    seconds, micro = divmod(total_us, 1_000_000)
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = "P" + (f"{days}D" if days else "")
    time = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if micro:
        time += f"{seconds}.{micro:06d}".rstrip("0") + "S"
    elif seconds:
        time += f"{seconds}S"
    if time:
        text += "T" + time
    return text if text != "P" else "PT0S"


def parse_duration(name: str, text: str) -> _dt.timedelta:
    """An ISO 8601 duration of days, hours, minutes and seconds."""
    match = _DURATION.fullmatch(text.strip())
    if not match or text.strip() in ("P", "PT") or text.strip().endswith("T"):
        raise InvalidArgument(
            f"{name} is {text[:40]!r}, not an ISO 8601 duration such as 'PT1M' or 'P14D'."
        )
    days, hours, minutes, seconds, fraction = match.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    total = int(days or 0) * 86_400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
    total += int(seconds or 0)
    if total >= NEVER.total_seconds() - 1:
        return NEVER
    return _dt.timedelta(seconds=total, microseconds=micro)


def _format_value(kind: str, value: Any, field: str = "") -> str:
    if kind == "duration":
        return format_duration(_duration(field, value))
    if kind == "bool":
        if not isinstance(value, bool):
            raise InvalidArgument(f"{field} must be True or False, not {value!r}.")
        return "true" if value else "false"
    if kind == "datetime":
        return str(value.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidArgument(f"{field} must be a whole number, not {value!r}.")
    if kind == "str" and not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string, not {value!r}.")
    return str(value)


def _parse_value(name: str, kind: str, text: str) -> Any:
    text = text.strip()
    if kind == "duration":
        return parse_duration(name, text)
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise InvalidArgument(f"{name} is {text[:40]!r}; it must be true or false.")
        return text.lower() == "true"
    if kind == "int":
        if not re.fullmatch(r"-?\d{1,18}", text):
            raise InvalidArgument(f"{name} is {text[:40]!r}; it must be a whole number.")
        return int(text)
    if kind == "datetime":
        match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)?",
                             text)
        if not match:
            raise InvalidArgument(f"{name} is {text[:40]!r}, not an ISO 8601 time.")
        base, fraction, zone = match.groups()
        stamp = f"{base}.{(fraction or '0')[:6].ljust(6, '0')}"
        zone = "+00:00" if zone in (None, "Z") else zone
        try:
            return _dt.datetime.fromisoformat(stamp + zone)
        except ValueError:
            raise InvalidArgument(f"{name} is {text[:40]!r}, not a valid time.") from None
    return text


# -- writing --------------------------------------------------------------------------


def description_xml(kind: str, props: Any, counts: RuntimeProperties | None = None,
                    *, answer: bool = False, version: str = API_VERSION) -> str:
    """The ``<QueueDescription>`` (or topic, subscription) element, in Service Bus order.

    Args:
        kind: ``queue``, ``topic`` or ``subscription``.
        props: The properties dataclass.
        counts: Runtime counts to include (answers only; requests leave them out).
        version: The api-version asked for: elements of later versions are left out.
    """
    tag, fields, _ = KINDS[kind]
    parts = [f'<{tag} xmlns="{SB}" xmlns:i="{XSI}">']
    for element, field, vkind in fields:
        if SINCE.get(element, "") > version:
            continue
        if vkind == _C:
            if counts is None:
                continue
            if element == "CountDetails":
                parts.append(f'<CountDetails xmlns:d2p1="{COUNTS_NS}">')
                for child, attr in _COUNT_DETAILS:
                    parts.append(f"<d2p1:{child}>{getattr(counts, attr)}</d2p1:{child}>")
                parts.append("</CountDetails>")
            elif element == "SizeInBytes":
                parts.append(f"<SizeInBytes>{counts.size_in_bytes}</SizeInBytes>")
            elif element == "MessageCount":
                parts.append(f"<MessageCount>{counts.total_message_count}</MessageCount>")
            elif element in _COUNT_FIELDS:
                value = getattr(counts, _COUNT_FIELDS[element])
                parts.append(f"<{element}>{value}</{element}>")
            continue
        if element == "EntityAvailabilityStatus" and answer:  # clients read it
            parts.append("<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>")
            continue
        if field is None:
            continue
        value = getattr(props, field, None)
        if value is None:
            continue
        if vkind == _ACCESS:
            if value:
                parts.append(access_xml(value))
            continue
        parts.append(f"<{element}>{escape(_format_value(vkind, value, field))}</{element}>")
    parts.append(f"</{tag}>")
    return "".join(parts)


def request_xml(kind: str, props: Any) -> bytes:
    """The Atom entry a client PUTs to create or update an entity."""
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<entry xmlns="{ATOM}"><content type="application/xml">'
        f"{description_xml(kind, props)}</content></entry>"
    ).encode()


def _entry(kind: str, props: Any, counts: RuntimeProperties | None, url: str, title: str,
           now: str, version: str = API_VERSION) -> str:
    described = description_xml(kind, props, counts, answer=True, version=version)
    return (
        f"<entry><id>{escape(url)}</id><title type=\"text\">{escape(title)}</title>"
        f"<published>{now}</published><updated>{now}</updated>"
        f'<link rel="self" href="{escape(url)}"/>'
        f'<content type="application/xml">{described}</content></entry>'
    )


def entry_xml(kind: str, props: Any, counts: RuntimeProperties | None, url: str,
              title: str, version: str = API_VERSION) -> bytes:
    """An Atom entry describing one entity (what GET and PUT answer), in the elements
    of api-version ``version``."""
    now = _format_value("datetime", _dt.datetime.now(_dt.UTC))
    body = _entry(kind, props, counts, url, title, now, version)
    return ('<?xml version="1.0" encoding="utf-8"?>'
            + body.replace("<entry>", f'<entry xmlns="{ATOM}">', 1)).encode()


def feed_xml(
    items: Sequence[tuple[str, Any, RuntimeProperties | None, str, str]], url: str, title: str,
    following: str | None = None, version: str = API_VERSION,
) -> bytes:
    """An Atom feed of entries ``(kind, props, counts, url, title)`` (what lists answer),
    with a ``next`` link to ``following`` when the listing goes on."""
    now = _format_value("datetime", _dt.datetime.now(_dt.UTC))
    entries = "".join(_entry(*item, now, version) for item in items)
    more = "" if following is None else f'<link rel="next" href="{escape(following)}"/>'
    return (
        f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{ATOM}">'
        f'<title type="text">{escape(title)}</title><id>{escape(url)}</id>'
        f'<updated>{now}</updated><link rel="self" href="{escape(url)}"/>{more}{entries}</feed>'
    ).encode()


# -- reading --------------------------------------------------------------------------


@dataclasses.dataclass
class Entry:
    """One parsed entry: its kind, title (the entity name), settable fields and counts."""

    kind: str
    title: str | None
    fields: dict[str, Any]
    counts: dict[str, int]


def _refuse(*_: Any) -> NoReturn:
    raise InvalidArgument("XML with a document type declaration or entities is not accepted.")


def _parse(data: bytes) -> ET.Element:
    if len(data) > _MAX_DOCUMENT:
        raise InvalidArgument(
            f"the XML document is {len(data)} bytes; the limit is {_MAX_DOCUMENT}."
        )
    builder = ET.TreeBuilder()
    expat = pyexpat.ParserCreate(namespace_separator="}")
    expat.buffer_text = True

    def start(tag: str, attrs: dict[str, str]) -> None:
        builder.start("{" + tag if "}" in tag else tag, attrs)

    def end(tag: str) -> None:
        builder.end("{" + tag if "}" in tag else tag)

    expat.StartElementHandler = start
    expat.EndElementHandler = end
    expat.CharacterDataHandler = builder.data
    expat.StartDoctypeDeclHandler = _refuse
    expat.EntityDeclHandler = _refuse
    expat.UnparsedEntityDeclHandler = _refuse
    expat.ExternalEntityRefHandler = _refuse
    try:
        expat.Parse(data, True)
        return builder.close()
    except pyexpat.ExpatError as exc:
        raise InvalidArgument(f"the body is not well-formed XML: {exc}.") from None
    except AssertionError:
        raise InvalidArgument("the body is not a complete XML document.") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _read_entry(entry: ET.Element) -> Entry:
    title = None
    description = None
    for child in entry:
        name = _local(child.tag)
        if name == "title":
            title = (child.text or "").strip()
        elif name == "content":
            described = [c for c in child]
            if len(described) != 1:
                raise InvalidArgument("an entry's content must hold exactly one description.")
            description = described[0]
    if description is None:
        raise InvalidArgument("the entry has no <content> with a description.")
    tag = _local(description.tag)
    kind = _KIND_OF.get(tag)
    if kind is None:
        raise InvalidArgument(
            f"unknown description <{tag[:60]}>; use QueueDescription, TopicDescription or "
            "SubscriptionDescription."
        )
    known = {element: (field, vkind) for element, field, vkind in KINDS[kind][1]}
    fields: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for child in description:
        element = _local(child.tag)
        if element not in known:
            raise InvalidArgument(f"unknown {kind} property <{element[:60]}>.")
        field, vkind = known[element]
        if vkind == _C:
            _read_counts(element, child, counts)
        elif vkind == _ACCESS and field is not None:
            fields[field] = read_access(child)
        elif field is not None:
            if len(child):
                raise InvalidArgument(f"<{element}> must hold a value, not elements.")
            text = child.text or ""
            if len(text) > 1024:
                raise InvalidArgument(f"<{element}> is {len(text)} characters; the limit is 1024.")
            fields[field] = _parse_value(element, vkind, text)
    return Entry(kind, title, fields, counts)


def _read_counts(element: str, node: ET.Element, counts: dict[str, int]) -> None:
    try:
        if element == "CountDetails":
            names = dict(_COUNT_DETAILS)
            for child in node:
                attr = names.get(_local(child.tag))
                if attr is not None:
                    counts[attr] = int((child.text or "0").strip())
        elif element == "SizeInBytes":
            counts["size_in_bytes"] = int((node.text or "0").strip())
        elif element == "MessageCount":
            counts["total_message_count"] = int((node.text or "0").strip())
        elif element in _COUNT_FIELDS:
            counts[_COUNT_FIELDS[element]] = int((node.text or "0").strip())
    except ValueError:
        raise InvalidArgument(f"<{element}> must hold whole numbers.") from None


def parse_entry(data: bytes) -> Entry:
    """Parse an Atom entry (a PUT body, or a GET answer).

    Raises:
        InvalidArgument: Not XML, a document type declaration, not an entry, an unknown
            description or property, a value of the wrong form.
    """
    root = _parse(data)
    if _local(root.tag) != "entry":
        raise InvalidArgument(f"expected an Atom <entry>, not <{_local(root.tag)[:60]}>.")
    return _read_entry(root)


def parse_feed(data: bytes) -> list[Entry] | Entry:
    """Parse a feed into its entries (or, if the document is an entry, that entry)."""
    root = _parse(data)
    if _local(root.tag) == "entry":
        return _read_entry(root)
    if _local(root.tag) != "feed":
        raise InvalidArgument(f"expected an Atom feed, not <{_local(root.tag)[:60]}>.")
    return [_read_entry(child) for child in root if _local(child.tag) == "entry"]


_FORWARDS = ("forward_to", "forward_dead_lettered_messages_to")


def build_properties(kind: str, name: str, fields: dict[str, Any], **extra: Any) -> Any:
    """The properties dataclass of ``kind`` from parsed fields; a forwarding target
    given as an address (``sb://HOST/orders``, as Service Bus writes it) is read as the
    entity it names, as aiosb's descriptions hold it."""
    cls = KINDS[kind][2]
    fields = {**fields, **extra}
    for field in _FORWARDS:
        if fields.get(field) is not None:
            fields[field] = forward_target_name(field, fields[field])
    return cls(name=name, **fields)


def addressed(props: Any, host: str) -> Any:
    """``props`` with its forwarding targets as Service Bus answers them: the address
    ``sb://HOST/NAME`` (the official administration clients' tests check its end)."""
    changes = {field: f"sb://{host}/{getattr(props, field)}" for field in _FORWARDS
               if getattr(props, field, None)}
    return dataclasses.replace(props, **changes) if changes else props


def runtime_properties(name: str, entry: Entry) -> RuntimeProperties:
    """Runtime counts from a parsed entry."""
    counts = dict(entry.counts)
    return RuntimeProperties(
        name=name,
        created_at_utc=entry.fields.get("created_at_utc"),
        updated_at_utc=entry.fields.get("updated_at_utc"),
        accessed_at_utc=entry.fields.get("accessed_at_utc"),
        **counts,
    )


_TIMES = {"CreatedAt": "created_at_utc", "UpdatedAt": "updated_at_utc",
          "AccessedAt": "accessed_at_utc"}
_COUNT_ELEMENTS = frozenset({"CountDetails", "SizeInBytes", "MessageCount",
                             "SubscriptionCount", "SqlFilterCount", "CorrelationFilterCount"})


def read_runtime(name: str, data: bytes) -> RuntimeProperties | None:
    """Runtime counts from a GET answer of any Service Bus namespace.

    Unlike :func:`parse_entry`, properties this module does not know are skipped (a
    real namespace may send newer ones), and aiosb's count extensions (deferred
    messages, fragments) are read when present. ``None`` when the answer holds no
    description: Service Bus answers the GET of an unknown entity with an empty feed.
    """
    root = _parse(data)
    entries = [root] if _local(root.tag) == "entry" else [
        child for child in root if _local(child.tag) == "entry"
    ]
    for entry in entries:
        for content in (c for c in entry if _local(c.tag) == "content"):
            for description in content:
                if _local(description.tag) in _KIND_OF:
                    return _runtime_of(name, description)
    return None


def _runtime_of(name: str, description: ET.Element) -> RuntimeProperties:
    counts: dict[str, Any] = {}
    times: dict[str, Any] = {}
    for child in description:
        element = _local(child.tag)
        if element in _COUNT_ELEMENTS:
            _read_counts(element, child, counts)
        elif element in _TIMES and child.text:
            times[_TIMES[element]] = _parse_value(element, "datetime", child.text)
    return RuntimeProperties(name=name, **times, **counts)


_STARTED = _dt.datetime.now(_dt.UTC)


def namespace_info_xml(name: str, tier: str, url: str) -> bytes:
    """The ``$namespaceinfo`` entry (what ``get_namespace_properties`` reads)."""
    now = _format_value("datetime", _dt.datetime.now(_dt.UTC))
    created = _format_value("datetime", _STARTED)
    units = "<MessagingUnits>1</MessagingUnits>" if tier == "premium" else ""
    return (
        f'<?xml version="1.0" encoding="utf-8"?><entry xmlns="{ATOM}">'
        f'<id>{escape(url)}</id><title type="text">{escape(name)}</title>'
        f"<updated>{now}</updated><author><name>{escape(name)}</name></author>"
        f'<link rel="self" href="{escape(url)}"/><content type="application/xml">'
        f'<NamespaceInfo xmlns="{SB}" xmlns:i="{XSI}"><CreatedTime>{created}</CreatedTime>'
        f"<MessagingSKU>{tier.capitalize()}</MessagingSKU>{units}"
        f"<ModifiedTime>{created}</ModifiedTime><Name>{escape(name)}</Name>"
        "<NamespaceType>Messaging</NamespaceType></NamespaceInfo></content></entry>"
    ).encode()
