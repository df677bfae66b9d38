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
from ._broker import FRAGMENT_SHIFT, MAX_DELIVERY_EXCEEDED, TTL_EXPIRED, EmulatorNamespace
from ._durable import Journal
from ._faults import OPERATIONS, Fault, Faults

__all__ = [
    "FRAGMENT_SHIFT",
    "MAX_DELIVERY_EXCEEDED",
    "OPERATIONS",
    "TTL_EXPIRED",
    "EmulatorNamespace",
    "Fault",
    "Faults",
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
        from ..errors import InvalidOperation

        raise InvalidOperation(
            f"namespace {name!r} exists on the {ns.tier} tier; it cannot be reopened as {tier}."
        )
    return ns


def namespaces() -> list[EmulatorNamespace]:
    """Every emulator namespace of this process."""
    return list(_registry.values())


def use_journal(journal: Journal | None) -> None:
    """Keep every namespace of this process in ``journal`` (durable mode), or stop."""
    global _journal
    _journal = journal
    for ns in _registry.values():
        ns.journal = journal
        if journal is not None:
            journal.namespace(ns)


def reset() -> None:
    """Forget every emulator namespace (their entities, messages and faults)."""
    global _journal
    for ns in _registry.values():
        ns.faults.heal()
        ns.detach_all()
        ns.journal = None
    _registry.clear()
    _journal = None
    CLOCK.reset()
