"""Durable mode (``aiosb serve --data-dir DIR``): the emulator's namespaces kept in SQLite.

A :class:`Journal` records what the broker changes (namespaces, entities, rules,
sessions, messages and their locks) and returns from :meth:`Journal.commit` once it is
on disk; at a restart :meth:`Journal.load` rebuilds every namespace as it was. The
journal groups the changes of every request that arrives meanwhile into one
transaction, written by a process of its own, so that SQLite's work takes another core.

The rooms (all private; the rest of aiosb uses only what this package exports):

* :mod:`._journal`: the :class:`Journal`, what the broker reports to it, and when its
  changes go to the writer;
* :mod:`._group_commit`: the journal's write policy: what a group commit writes, the
  frames it is cut into, what goes back to pending when a frame is not written, when a
  lock is written;
* :mod:`._writer_client`: the pipe to the writer process (frames out, answers in, each
  frame held to a deadline);
* :mod:`._writer_process`: the writer, a process of its own run by file path (standard
  library only);
* :mod:`._database`: the one way to open the database (each use's pragmas), and the one
  cache of entity ids (standard library only: the writer imports it by path);
* :mod:`._schema`: the tables, and moving an older database's rows to the compact table;
* :mod:`._rows`: how a message row, entity properties and rules are written and read;
* :mod:`._recovery`: the restart: what is rebuilt before listening, the messages loaded
  in the background, what an operation waits for.

The durable package sits below the broker and the registry of :mod:`aiosb.emulator`,
and never imports them: it sees a namespace through
:class:`~aiosb.emulator._namespace.Namespace`, and makes one through what
:func:`open_namespaces_with` plugged in.
"""

from __future__ import annotations

from ._journal import LOCK_WRITE_AFTER, Journal, WriteFailed, open_namespaces_with

__all__ = ["LOCK_WRITE_AFTER", "Journal", "WriteFailed", "open_namespaces_with"]
