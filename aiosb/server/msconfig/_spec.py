"""What a ``Config.json`` says, once read: its entities and rules in aiosb's terms, and
the one error of a file aiosb cannot use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidArgument
from ...rules import RuleFilter, SqlRuleAction


class ConfigError(InvalidArgument):
    """A ``Config.json`` aiosb cannot use, in one sentence naming the JSON path and the
    field (the caller names the file)."""


@dataclass(frozen=True)
class RuleSpec:
    """A rule as the file gives it."""

    name: str
    filter: RuleFilter
    action: SqlRuleAction | None = None


@dataclass(frozen=True)
class EntitySpec:
    """A queue, topic or subscription as the file gives it: aiosb's property names, with
    Microsoft's defaults for what it leaves out."""

    kind: str  # "queue", "topic" or "subscription"
    name: str
    properties: Mapping[str, Any]
    topic: str = ""
    #: A subscription's rules, when the file lists them (None: it does not).
    rules: tuple[RuleSpec, ...] | None = None
    #: Where the file gives it (``UserConfig.Namespaces[0].Queues[3]``), for sentences.
    where: str = ""

    @property
    def path(self) -> str:
        return f"{self.topic}/subscriptions/{self.name}" if self.kind == "subscription" \
            else self.name


@dataclass(frozen=True)
class EmulatorConfig:
    """A whole file: the namespace, its entities in the order to create them (queues,
    then topics, each topic's subscriptions after it), and what was reported."""

    namespace: str
    entities: tuple[EntitySpec, ...]
    warnings: tuple[str, ...] = field(default=())
    #: The file it was read from (:func:`~aiosb.server.msconfig.load`), for messages.
    source: str | None = field(default=None, compare=False)
