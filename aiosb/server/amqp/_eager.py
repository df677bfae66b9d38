"""A coroutine run at once, in the turn of the loop that starts it, and in a task of its
own only if it has to wait (#50).

A sender link's transfers are served away from the frame reader (a task per batch of
them), so that an operation that hangs holds up its own link only. Most never wait: an
in-memory send is done without a pause, and a task made for it (created, scheduled,
registered, run a turn later) cost the server more than the send itself when a client
sends one message at a time. :func:`run_eagerly` runs the coroutine until it first
waits, and hands the rest to a task then (what Python 3.12's eager task factory does
for every task of a loop). Only for code that does not use
:func:`asyncio.current_task` (``asyncio.timeout``, ``wait_for``) before it first waits:
there, the current task is the caller's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["run_eagerly"]


def run_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``coro`` as far as it goes now; ``None`` if it finished, else the task that
    runs the rest of it (to cancel, or to see whether it is done)."""
    try:
        waits_for = coro.send(None)
    except StopIteration:
        return None
    task = asyncio.get_running_loop().create_task(_rest(coro, waits_for))
    task.add_done_callback(functools.partial(_unstarted, coro, waits_for))
    return task


def _unstarted(coro: Coroutine[Any, Any, None], waits_for: Any, task: asyncio.Task[None]
               ) -> None:
    """A task cancelled before its first step (a transfer and a detach in one read)
    never ran :func:`_rest`: the coroutine hears the cancellation where it waits, and
    what it waits on is cancelled, as :meth:`asyncio.Task.cancel` does for a coroutine
    of the task's own (it was left suspended, to be closed by the garbage collector)."""
    if getattr(coro, "cr_frame", None) is None:
        return  # it ran to its end in the task (the usual case)
    if isinstance(waits_for, asyncio.Future):
        waits_for.cancel()
    try:
        coro.throw(asyncio.CancelledError())
    except (asyncio.CancelledError, StopIteration):
        return
    except BaseException as exc:  # what a task would have ended with: said, not lost
        task.get_loop().call_exception_handler({
            "message": "a coroutine failed on its cancellation", "exception": exc,
            "task": task})
        return
    coro.close()  # it waits again, with no task to go on: ended


async def _rest(coro: Coroutine[Any, Any, None], waits_for: Any) -> None:
    await _Resumed(coro, waits_for)


class _Resumed:
    """The rest of a started coroutine, as an awaitable: what it waits for goes to the
    task that awaits this, and what the task sends or throws back goes to it (the
    ``yield from`` of a generator, for a coroutine already under way)."""

    def __init__(self, coro: Coroutine[Any, Any, None], waits_for: Any) -> None:
        self._coro = coro
        self._waits_for = waits_for

    def __await__(self) -> Generator[Any, Any, None]:
        coro, waits_for = self._coro, self._waits_for
        while True:
            try:
                sent = yield waits_for
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation: the coroutine hears it
                try:
                    waits_for = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waits_for = coro.send(sent)
                except StopIteration:
                    return
