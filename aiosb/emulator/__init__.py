"""The embedded Service Bus emulator.

Namespaces live in this process and are created on first use::

    ns = aiosb.emulator.namespace("contoso")          # the same object every time
    with ns.faults.fail("orders", kind="timeout"):    # an outage, healed on exit
        ...

``aiosb.connect("memory://contoso")`` talks to the same namespace. Use
:func:`reset` (or the ``aiosb_emulator`` pytest fixture) to start each test afresh.
"""

from __future__ import annotations

from .._clock import CLOCK
from ..errors import InvalidOperation
from ._broker import NAMESPACE_NAME, EmulatorNamespace, check_namespace_name
from ._faults import OPERATIONS, Fault, Faults
from ._manage import MAX_ENTITIES, EntityStatus
from ._partitions import FRAGMENT_SHIFT
from ._record import MAX_DELIVERY_EXCEEDED, TTL_EXPIRED
from ._rules import MAX_CORRELATION_FILTERS, MAX_SQL_FILTERS
from ._sessions import SessionStatus
from .durable import Journal, open_namespaces_with

__all__ = [
    "FRAGMENT_SHIFT",
    "MAX_CORRELATION_FILTERS",
    "MAX_DELIVERY_EXCEEDED",
    "MAX_ENTITIES",
    "MAX_SQL_FILTERS",
    "NAMESPACE_NAME",
    "OPERATIONS",
    "TTL_EXPIRED",
    "EmulatorNamespace",
    "EntityStatus",
    "Fault",
    "Faults",
    "Journal",
    "SessionStatus",
    "check_namespace_name",
    "exists",
    "journal",
    "namespace",
    "namespaces",
    "reset",
    "use_journal",
]

_registry: dict[str, EmulatorNamespace] = {}
_journal: Journal | None = None


def namespace(name: str, *, tier: str | None = None) -> EmulatorNamespace:
    """The emulator namespace ``name`` of this process, created on first use.

    Args:
        name: The namespace name (case-insensitive).
        tier: ``"standard"`` (the default), ``"premium"`` or ``"basic"``; only taken
            when the namespace is created. Asking an existing namespace for another
            tier is an error.

    Raises:
        InvalidArgument: A name or tier that is not valid.
        InvalidOperation: ``tier`` differs from the existing namespace's tier.
    """
    key = name.lower() if isinstance(name, str) else name
    ns = _registry.get(key)
    if ns is None:
        ns = _registry[key] = EmulatorNamespace(name, tier or "standard")
        if _journal is not None:
            ns.journal = _journal
            _journal.namespace(ns)
    elif tier is not None and tier != ns.tier:
        raise InvalidOperation(
            f"namespace {name!r} exists on the {ns.tier} tier; it cannot be reopened as {tier}."
        )
    return ns


def _reopen(name: str, tier: str) -> EmulatorNamespace:
    """The namespace ``name``, made with ``tier`` if it is new (a journal reloading it)."""
    ns = _registry.get(name.lower())
    if ns is None:
        ns = _registry[name.lower()] = EmulatorNamespace(name, tier)
    return ns


open_namespaces_with(_reopen)


def exists(name: str) -> bool:
    """Whether this process has the emulator namespace ``name`` (case-insensitive)."""
    return name.lower() in _registry


def namespaces() -> list[EmulatorNamespace]:
    """Every emulator namespace of this process."""
    return list(_registry.values())


def journal() -> Journal | None:
    """The journal this process keeps its namespaces in (durable mode), or ``None``."""
    return _journal


def use_journal(journal: Journal | None) -> None:
    """Keep every namespace of this process in ``journal`` (durable mode; what they hold
    already is written too), or, with ``None``, stop. Call it on the running loop.

    Raises:
        InvalidOperation: Another journal is in use (one durable server per process).
    """
    global _journal
    if journal is not None and _journal is not None and _journal is not journal:
        raise InvalidOperation(
            f"the emulator is kept in {_journal.path} already; one durable server per process."
        )
    _journal = journal
    for ns in _registry.values():
        if journal is not None and ns.journal is not journal:
            ns.journal = journal
            journal.snapshot(ns)
        elif journal is None:
            ns.journal = None


def reset() -> None:
    """Forget every emulator namespace (their entities, messages and faults)."""
    if _journal is not None:
        raise InvalidOperation(
            f"the emulator is being served durably from {_journal.path}; stop that server "
            "before resetting it."
        )
    for ns in _registry.values():
        ns.faults.heal()
        ns.detach_all()
    _registry.clear()
    CLOCK.reset()
