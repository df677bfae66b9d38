"""The garbage collector while a durable server loads its messages (#39,
:mod:`._recovery`): off during a load (the collector would walk the growing heap again
and again while it grows by a million records: a quarter of the load's time), what a
large load holds frozen afterwards (its first passes would walk every record), given
back when that server stops.

Imports nothing of aiosb.
"""

from __future__ import annotations

import gc

__all__ = ["Collector"]


class Collector:
    """The garbage collector, kept off while any recovery of the process loads (the last
    to finish turns it back on, if it was on: two servers may load at once), and what
    they froze (given back to the collector when the server that froze it stops)."""

    loading = 0
    was_enabled = False

    @classmethod
    def hold(cls) -> None:
        """A load begins."""
        if not cls.loading:
            cls.was_enabled = gc.isenabled()
            gc.disable()
        cls.loading += 1

    @classmethod
    def release(cls, freeze: bool) -> bool:
        """One load ended (``freeze``: a large one); whether what it holds was frozen."""
        cls.loading -= 1
        if cls.loading or not cls.was_enabled:
            return False
        if freeze:
            # What became garbage during the load (a request's cycles, the host's) is
            # collected first: frozen, it would never be (#39).
            gc.collect()
            gc.freeze()
        gc.enable()
        return freeze

    @staticmethod
    def thaw() -> None:
        """A server whose load froze stops: what it held may go (and what another
        froze, which is only walked again)."""
        gc.unfreeze()
