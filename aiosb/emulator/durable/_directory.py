"""One server to a data directory: while a :class:`~._journal.Journal` is open it holds a
lock on ``aiosb.lock`` in the directory, and another journal that opens the same
directory (a second ``aiosb serve --data-dir DIR``, or a second in this process) is
refused, once it has waited :data:`WAIT_SECONDS`, saying which process holds it. Two
writers of one database would each rebuild the namespaces from it and then write over
each other's rows.

The lock is the operating system's (``fcntl.flock``), on the lock file as the journal
opened it: the journal's writer process is handed the same open file
(:func:`._writer_client.start_writer`), so the lock lasts while either lives, and goes
with them however they end (a killed server and its writer leave nothing to clean
up). A journal waits :data:`WAIT_SECONDS` for a held directory before it is refused: a
server restarted at once after a ``kill -9`` waits for the old writer to finish the
frame it was writing. Where ``fcntl`` is missing (Windows) nothing is locked.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

from ...errors import InvalidOperation

__all__ = ["LOCK_FILE", "hold", "release"]

LOCK_FILE = "aiosb.lock"
#: Seconds a journal waits for a directory another holds (a killed server's writer
#: finishing its frame), then it is refused.
WAIT_SECONDS = 5.0
_HELD = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)
_POLL = 0.05

log = logging.getLogger("aiosb.emulator")


def hold(directory: Path) -> int | None:
    """Lock ``directory`` (waiting up to :data:`WAIT_SECONDS` while another holds it):
    the lock file's descriptor, to :func:`release` (``None`` where nothing is locked).
    It blocks: run it off the event loop.

    Raises:
        InvalidOperation: Another journal holds the directory.
        OSError: The lock file could not be made, written or locked (a file system
            without locks: an error of its own, not "in use").
    """
    try:
        import fcntl
    except ImportError:  # Windows
        return None
    handle = os.open(directory / LOCK_FILE,
                     os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        deadline, logged = time.monotonic() + WAIT_SECONDS, False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in _HELD:
                    raise
            holder = os.pread(handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
            if time.monotonic() >= deadline:
                raise InvalidOperation(
                    f"{directory} is in use by another aiosb serve (process {holder}); give "
                    "this one a --data-dir of its own, or stop the other first.")
            if not logged:
                log.info("waiting up to %g s for %s (held by process %s)", WAIT_SECONDS,
                         directory, holder)
                logged = True
            time.sleep(_POLL)
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(handle)
        raise
    return handle


def release(handle: int | None) -> None:
    """Let the directory go (once its writer process has gone too)."""
    if handle is not None:
        os.close(handle)
