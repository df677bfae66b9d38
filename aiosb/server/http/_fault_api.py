"""Fault injection over HTTP: the API of :class:`~aiosb.emulator.Faults` at
``/{namespace}/$faults`` (inject, list, heal one, heal all), and the one reading of a
fault's JSON body (:func:`inject`), which the explorer's ``POST /explorer/api/faults``
uses too (#49): what one refuses, the other does."""


from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from ... import emulator
from ...emulator import Fault, Faults
from ...errors import InvalidArgument, MessageNotFound
from ._requests import (
    Route,
    as_seconds,
    object_body,
    str_or_none,
    whole,
)

__all__ = ["FIELDS", "faults", "heal", "inject", "view"]

#: A fault's JSON fields, with their defaults.
FIELDS: dict[str, Any] = {
    "entity": None, "kind": "unavailable", "operations": None, "seconds": None, "fragment": None,
}
#: The highest fragment index a fault may name (the broker then checks it against the
#: entity's own count).
MAX_FRAGMENT = 1023


def inject(faults: Faults, fields: Mapping[str, Any]) -> Fault:
    """Inject the fault a JSON body describes (the keys of :data:`FIELDS`; one left out
    has its default): ``entity`` (a path, or none: the whole namespace), ``kind``
    (``unavailable``, ``timeout``, ``transient`` or ``delay``), ``operations`` (a list of
    ``send``, ``receive``, ``manage``; none: all), ``seconds`` (a delay's, 0 to 3600,
    and only a delay's) and ``fragment`` (0 to :data:`MAX_FRAGMENT`: one fragment of a
    partitioned queue or topic, of any kind but a delay).

    Raises:
        InvalidArgument: A field it does not know (a misspelt ``fragmnet`` would
            otherwise leave a fault of the whole entity), a field of the wrong type or
            out of range, or one the broker refuses (an unknown kind or operation, a
            fragment the entity does not have).
    """
    unknown = fields.keys() - FIELDS.keys()
    if unknown:
        raise InvalidArgument(f"unknown field(s) {', '.join(sorted(unknown))[:200]}; "
                              f"known: {', '.join(sorted(FIELDS))}.")
    entity = str_or_none("entity", fields.get("entity"))
    kind = fields.get("kind", "unavailable")
    operations = fields.get("operations")
    if operations is not None and (
        not isinstance(operations, list) or not all(isinstance(o, str) for o in operations)
    ):
        raise InvalidArgument("operations must be a list of 'send', 'receive', 'manage'.")
    ops = emulator.OPERATIONS if operations is None else operations
    seconds, fragment = fields.get("seconds"), fields.get("fragment")
    if seconds is not None and kind != "delay":
        raise InvalidArgument("seconds is only for faults of kind 'delay'.")
    if fragment is not None:
        if entity is None:
            raise InvalidArgument("a fragment fault needs its entity.")
        index = whole("fragment", fragment, 0, MAX_FRAGMENT)
        return faults.fail_fragment(entity, index, kind=kind, operations=ops)
    if kind == "delay":
        return faults.delay(entity, as_seconds("seconds", seconds, 3600), operations=ops)
    return faults.fail(entity, kind=kind, operations=ops)


def view(fault: Fault) -> dict[str, Any]:
    """A fault as JSON: its id, entity, kind, operations, seconds and fragment."""
    return {"id": fault.id, "entity": fault.entity, "kind": fault.kind,
            "operations": sorted(fault.operations), "seconds": fault.seconds,
            "fragment": fault.fragment}


def heal(faults: Faults, fault_id: str | None) -> int:
    """Heal the fault ``fault_id`` or, with ``None``, every fault; how many were healed.

    Raises:
        MessageNotFound: No active fault has that id.
    """
    if fault_id is None:
        return faults.heal()
    fault = faults.get(fault_id)
    if fault is None:
        raise MessageNotFound(f"no active fault with id {fault_id[:40]!r}.")
    fault.heal()
    return 1


async def faults(request: web.Request, route: Route) -> web.StreamResponse:
    faults = emulator.namespace(route.namespace).faults
    segs = route.segments
    method = request.method
    if len(segs) == 1 and method == "GET":
        return web.json_response({"faults": [view(f) for f in faults.active]})
    if len(segs) <= 2 and method == "DELETE":
        return web.json_response({"healed": heal(faults, segs[1] if len(segs) == 2 else None)})
    if len(segs) != 1 or method != "POST":
        raise InvalidArgument(
            "faults: POST /{ns}/$faults injects, GET lists, DELETE /{ns}/$faults heals "
            "all, DELETE /{ns}/$faults/{id} heals one."
        )
    fault = inject(faults, object_body(await request.read(), FIELDS))
    return web.json_response({"id": fault.id}, status=201)
