"""Fault injection over HTTP: the API of :class:`~aiosb.emulator.Faults` at
``/{namespace}/$faults`` (inject, list, heal one, heal all)."""


from __future__ import annotations

from aiohttp import web

from ... import emulator
from ...errors import (
    InvalidArgument,
    InvalidOperation,
    MessageNotFound,
)
from ._requests import (
    Route,
    as_seconds,
    object_body,
    str_or_none,
    whole,
)


async def faults(request: web.Request, route: Route) -> web.StreamResponse:
    faults = emulator.namespace(route.namespace).faults
    segs = route.segments
    method = request.method
    if len(segs) == 1 and method == "GET":
        return web.json_response(
            {
                "faults": [
                    {
                        "id": f.id,
                        "entity": f.entity,
                        "kind": f.kind,
                        "operations": sorted(f.operations),
                        "seconds": f.seconds,
                    }
                    for f in faults.active
                ]
            }
        )
    if len(segs) == 1 and method == "DELETE":
        return web.json_response({"healed": faults.heal()})
    if len(segs) == 2 and method == "DELETE":
        fault = faults.get(segs[1])
        if fault is None:
            raise MessageNotFound(f"no active fault with id {segs[1][:40]!r}.")
        fault.heal()
        return web.json_response({"healed": 1})
    if len(segs) != 1 or method != "POST":
        raise InvalidArgument(
            "faults: POST /{ns}/$faults injects, GET lists, DELETE /{ns}/$faults heals "
            "all, DELETE /{ns}/$faults/{id} heals one."
        )
    fields = object_body(
        await request.read(),
        {"entity": None, "kind": "unavailable", "operations": None, "seconds": None,
         "fragment": None},
    )
    entity = str_or_none("entity", fields["entity"])
    operations = fields["operations"]
    if operations is not None and (
        not isinstance(operations, list) or not all(isinstance(o, str) for o in operations)
    ):
        raise InvalidArgument("operations must be a list of 'send', 'receive', 'manage'.")
    ops = emulator.OPERATIONS if operations is None else operations
    if fields["fragment"] is not None:
        fail_fragment = getattr(faults, "fail_fragment", None)
        if fail_fragment is None:
            raise InvalidOperation("this emulator has no fragment faults (fail_fragment).")
        if entity is None:
            raise InvalidArgument("a fragment fault needs its entity.")
        fault = fail_fragment(entity, whole("fragment", fields["fragment"], 0, 1023))
    elif fields["kind"] == "delay":
        seconds = as_seconds("seconds", fields["seconds"], 3600)
        fault = faults.delay(entity, seconds, operations=ops)
    else:
        if fields["seconds"] is not None:
            raise InvalidArgument("seconds is only for faults of kind 'delay'.")
        fault = faults.fail(entity, kind=fields["kind"], operations=ops)
    return web.json_response({"id": fault.id}, status=201)
