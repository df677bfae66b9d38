"""One process to a data directory: while a :class:`~._journal.Journal` is open, its
process holds a lock on ``aiosb.lock`` in the directory, and a second process that opens
the same directory (a second ``aiosb serve --data-dir DIR``) is refused at once, saying
which process holds it. Two writers of one database would each rebuild the namespaces
from it and then write over each other's rows.

The lock is the operating system's (``fcntl.lockf``): it goes with the process, however
the process ends (a killed server leaves nothing to clean up), and it is the process's,
so that a test reopening a directory in the process that already has it open is not
refused. Where ``fcntl`` is missing (Windows) nothing is locked.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import InvalidOperation

__all__ = ["LOCK_FILE", "hold", "release"]

LOCK_FILE = "aiosb.lock"


def hold(directory: Path) -> int | None:
    """Lock ``directory`` for this process: the lock file's descriptor, to
    :func:`release` (``None`` where nothing is locked).

    Raises:
        InvalidOperation: Another process holds the directory.
    """
    try:
        import fcntl
    except ImportError:  # Windows
        return None
    path = directory / LOCK_FILE
    handle = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(handle)
        raise InvalidOperation(
            f"{directory} is in use by another aiosb serve (process {holder}); give this "
            "one a --data-dir of its own, or stop the other first.") from None
    os.ftruncate(handle, 0)
    os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)
    return handle


def release(handle: int | None) -> None:
    """Let the directory go (closing the descriptor drops the lock)."""
    if handle is not None:
        os.close(handle)
