"""A queue's or topic's ``<AuthorizationRules>`` in the Atom management protocol, as
Service Bus (and the official administration clients) write and read them::

    <AuthorizationRules><AuthorizationRule i:type="SharedAccessAuthorizationRule">
      <ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>
      <Rights><AccessRights>Listen</AccessRights></Rights>
      <KeyName>reader</KeyName><PrimaryKey>...</PrimaryKey><SecondaryKey>...</SecondaryKey>
    </AuthorizationRule></AuthorizationRules>

(the elements of the SDK's generated ``AuthorizationRule``, in its order; the rule's
created and modified times are not kept, so not written). Imports the vocabulary only.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from xml.sax.saxutils import escape

from ..entities import AuthorizationRule
from ..errors import InvalidArgument

__all__ = ["read_access", "access_xml"]

_TYPE = "SharedAccessAuthorizationRule"
_LIMIT = 12  # rules an entity may have (Service Bus's); more are refused on reading


def access_xml(rules: Sequence[AuthorizationRule]) -> str:
    """The ``<AuthorizationRules>`` element of ``rules`` (inside a description whose
    ``i`` prefix is XML Schema instance)."""
    parts = ["<AuthorizationRules>"]
    for rule in rules:
        rights = "".join(f"<AccessRights>{escape(r)}</AccessRights>" for r in rule.rights)
        parts.append(
            f'<AuthorizationRule i:type="{_TYPE}">'
            f"<ClaimType>{escape(rule.claim_type)}</ClaimType>"
            f"<ClaimValue>{escape(rule.claim_value)}</ClaimValue>"
            f"<Rights>{rights}</Rights><KeyName>{escape(rule.key_name)}</KeyName>"
            + "".join(f"<{tag}>{escape(key)}</{tag}>" for tag, key in (
                ("PrimaryKey", rule.primary_key), ("SecondaryKey", rule.secondary_key))
                if key is not None)
            + "</AuthorizationRule>"
        )
    parts.append("</AuthorizationRules>")
    return "".join(parts)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _text(node: ET.Element, name: str) -> str | None:
    found = next((c for c in node if _local(c.tag) == name), None)
    return None if found is None else (found.text or "").strip()


def read_access(node: ET.Element) -> tuple[AuthorizationRule, ...]:
    """The rules of an ``<AuthorizationRules>`` element (checked when the entity's
    description is).

    Raises:
        InvalidArgument: Not ``AuthorizationRule`` elements with a key name, or too many.
    """
    rules: list[AuthorizationRule] = []
    for child in node:
        if _local(child.tag) != "AuthorizationRule":
            raise InvalidArgument(f"<AuthorizationRules> holds <{_local(child.tag)[:60]}>; "
                                  "it holds <AuthorizationRule> elements only.")
        if len(rules) == _LIMIT:
            raise InvalidArgument(f"an entity has at most {_LIMIT} authorization rules.")
        name = _text(child, "KeyName")
        if not name:
            raise InvalidArgument("an <AuthorizationRule> has no <KeyName>.")
        rights_node = next((c for c in child if _local(c.tag) == "Rights"), None)
        rights = () if rights_node is None else tuple(
            (c.text or "").strip() for c in rights_node if _local(c.tag) == "AccessRights")
        rules.append(AuthorizationRule(
            key_name=name, rights=rights, primary_key=_text(child, "PrimaryKey") or None,
            secondary_key=_text(child, "SecondaryKey") or None,
            claim_type=_text(child, "ClaimType") or "SharedAccessKey",
            claim_value=_text(child, "ClaimValue") or "None",
        ))
    return tuple(rules)
