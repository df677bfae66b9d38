"""Who may use the explorer (:mod:`aiosb.server.explorer`), and what each may see.

**Sessions** (:class:`Sessions`): a random token (the cookie) for each sign-in, ending
after :data:`SESSION_SECONDS`, at sign-out, or when the same browser signs in again
(the cookie it presents then is dropped). A key holds at most :data:`SESSIONS_PER_KEY`
at once, its oldest going first: one key signing in over and over pushes out only its
own sessions, never another key's.

**The key's way in** (:func:`may_sign_in`): the sign-in posts the key itself, so over
plain HTTP it is taken only from the server's own machine (a loopback address); from
anywhere else the server must be served over TLS. The rest of the server sees only
expiring SAS tokens; a key read off the network would be good until it is changed.

**Guessers** (:class:`Throttle`): the key is compared first, in constant time, and the
right key signs in at once, whatever waits: a person who mistyped, or another on the
same machine, is never refused nor kept waiting behind a guesser (#48). Wrong keys are
counted for each client address *and key name* together, and answered in the pair's
*lane*, one at a time, each 401 after :data:`PAUSE_SECONDS`. A pair that gives
:data:`FAILURES` wrong keys within :data:`FAILURE_WINDOW` seconds is *slowed* for
:data:`BLOCK_FIRST` seconds, twice as long each time again (up to :data:`BLOCK_MOST`):
its wrong keys are then answered 429 after :data:`SLOW_SECONDS` each. At most
:data:`QUEUED_MOST` wrong keys of a pair are in its lane at once; another is answered
429 at once (:class:`Crowded`), so that waiting guesses, each holding a connection
(which every port shares), cannot pile up. Only the server's own key names are counted
(a guess at another name can never succeed); at most :data:`CLIENTS_KEPT` pairs are
remembered.

What this bounds, and what not: a guesser who sends one key after another is answered
once every :data:`SLOW_SECONDS`; one who sends many at once learns of the right one at
once (it is answered 200 whatever waits), so against a guesser with many connections
the key's own strength is the defence (a long random key: 32 random bytes, as Service
Bus makes them); the lane keeps its wrong keys from costing the server more than
:data:`QUEUED_MOST` connections a pair.

**What a session sees** (:func:`visible`): REST gives an entity's description, its
rules and the namespace's faults to Manage keys only; so does the explorer. A session
without Manage gets the namespaces and entities by name and kind, with their counts,
sizes and rates, and nothing of their settings or faults.
"""


from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..http._hosts import is_loopback

#: How long a sign-in lasts, in seconds.
SESSION_SECONDS = 8 * 3600
#: Sessions one key holds at once (its oldest goes first).
SESSIONS_PER_KEY = 50
#: Wrong keys from one address for one key name within FAILURE_WINDOW seconds before
#: that pair is slowed.
FAILURES, FAILURE_WINDOW = 5, 60.0
#: How long a pair is first slowed, in seconds, and the longest (doubling between).
BLOCK_FIRST, BLOCK_MOST = 30.0, 900.0
#: While slowed, a pair's sign-ins are checked one at a time, a wrong key answered
#: after this many seconds.
SLOW_SECONDS = 2.0
#: A wrong key is answered after this many seconds (a pair not slowed).
PAUSE_SECONDS = 0.2
#: Wrong keys of one (address, key name) pair in its lane at once (answered or waiting
#: their turn); one more is answered 429 at once.
QUEUED_MOST = 4
#: After this long without a failure a pair starts afresh, in seconds.
FORGIVE = 3600.0
#: (address, key name) pairs remembered at once (the one that failed longest ago goes
#: first).
CLIENTS_KEPT = 4096
#: What a session without Manage sees of an entity in the live snapshot.
PUBLIC_FIELDS = ("path", "kind", "topic", "counts", "size", "subscriptions", "sessions",
                 "rate")


@dataclass(slots=True)
class Session:
    """One sign-in: its key's name and rights, its CSRF token, when it ends (epoch)."""

    key_name: str
    rights: frozenset[str]
    csrf: str
    expires: float


class Sessions:
    """The signed-in sessions, by cookie token."""

    def __init__(self) -> None:
        self._by_token: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._by_token)

    def open(self, key_name: str, rights: frozenset[str], replacing: str = ""
             ) -> tuple[str, Session]:
        """A new session for ``key_name`` (and its token), dropping the session of the
        token ``replacing`` (the cookie presented at sign-in), the expired, and the
        key's oldest past :data:`SESSIONS_PER_KEY`."""
        self._by_token.pop(replacing, None)
        now = time.time()
        mine = []
        for token, session in list(self._by_token.items()):
            if session.expires <= now:
                del self._by_token[token]
            elif session.key_name == key_name:
                mine.append(token)
        for token in mine[:max(0, len(mine) - SESSIONS_PER_KEY + 1)]:
            del self._by_token[token]  # oldest first: the dict keeps the order of sign-in
        token = secrets.token_urlsafe(32)
        session = Session(key_name, rights, secrets.token_urlsafe(32), now + SESSION_SECONDS)
        self._by_token[token] = session
        return token, session

    def get(self, token: str) -> Session | None:
        """The live session of ``token``, if any."""
        session = self._by_token.get(token)
        if session is None or session.expires <= time.time():
            return None
        return session

    def is_live(self, token: str, session: Session) -> bool:
        """Whether ``session`` is still the one of ``token`` and not expired."""
        return self._by_token.get(token) is session and session.expires > time.time()

    def close(self, token: str) -> None:
        """Sign out."""
        self._by_token.pop(token, None)


class Crowded(Exception):
    """:data:`QUEUED_MOST` wrong keys of one pair wait already: this one is answered at
    once; ``wait`` is how long the pair stays slowed."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"too many wrong keys waiting (slowed {wait:.0f} s more)")
        self.wait = wait

    @property
    def retry_after(self) -> int:
        """The seconds to tell the client to wait (at least one)."""
        return max(1, math.ceil(self.wait))


def key_matches(key: str, secrets_of: Iterable[str]) -> bool:
    """Whether ``key`` is one of ``secrets_of``, in a time that says nothing of how much
    of one it matched, of its length, nor of which matched: each is compared, as a
    digest of one length, with :func:`hmac.compare_digest`."""
    given = hashlib.sha256(key.encode()).digest()
    found = False
    for secret in secrets_of:
        found |= hmac.compare_digest(given, hashlib.sha256(secret.encode()).digest())
    return found


def may_sign_in(secure: bool, address: str | None) -> str | None:
    """Why a sign-in over this channel is refused (``None``: it is not): the key
    crosses the network readable over plain HTTP unless the client is on this
    machine."""
    if secure or is_loopback(address):
        return None
    return (f"signing in over plain HTTP from {str(address)[:60]} would send the key across "
            "the network readable: serve with TLS (aiosb serve --tls, or --tls-cert and "
            "--tls-key) and open the explorer over https://, or sign in from the server's "
            "own machine.")


class Throttle:
    """Wrong keys by (client address, key name), and which pairs are slowed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: (address, key name) -> [window start, failures in it, times slowed,
        #: slowed until, last failure]
        self._clients: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        #: The one-at-a-time lane of each pair giving wrong keys now: its lock, and how
        #: many wrong keys hold it or wait for it.
        self._lanes: dict[tuple[str, str], list[Any]] = {}

    def wait(self, client: str, key_name: str) -> float:
        """Seconds ``client`` stays slowed for ``key_name`` (0: it is not)."""
        entry = self._clients.get((client, key_name))
        return 0.0 if entry is None else max(0.0, entry[3] - self._clock())

    async def wrong(self, client: str, key_name: str) -> float:
        """A wrong key of ``client`` for ``key_name``, answered in the pair's lane: one
        at a time, each counted when its turn comes and answered after
        :data:`PAUSE_SECONDS`, or :data:`SLOW_SECONDS` while the pair is slowed.

        Returns:
            How long the pair stays slowed (0: it is not, and the key is answered 401).

        Raises:
            Crowded: At once, the key counted, when :data:`QUEUED_MOST` wrong keys of
                the pair are in its lane already.
        """
        pair = (client, key_name)
        lane = self._lanes.get(pair)
        if lane is None:
            lane = self._lanes[pair] = [asyncio.Lock(), 0]
        elif lane[1] >= QUEUED_MOST:
            self.failed(client, key_name)
            raise Crowded(self.wait(client, key_name))
        lane[1] += 1
        try:
            async with lane[0]:
                self.failed(client, key_name)
                wait = self.wait(client, key_name)
                await asyncio.sleep(SLOW_SECONDS if wait > 0 else PAUSE_SECONDS)
                return wait
        finally:
            lane[1] -= 1
            if not lane[1]:
                del self._lanes[pair]

    def failed(self, client: str, key_name: str) -> None:
        """``client`` gave a wrong key for ``key_name``."""
        now = self._clock()
        pair = (client, key_name)
        entry = self._clients.pop(pair, None)
        if entry is None or now - entry[4] > FORGIVE:
            entry = [now, 0, 0, 0.0, now]
        if now - entry[0] > FAILURE_WINDOW:
            entry[0], entry[1] = now, 0
        entry[1] += 1
        entry[4] = now
        if entry[1] >= FAILURES and entry[3] <= now:
            entry[2] += 1
            entry[3] = now + min(BLOCK_MOST, BLOCK_FIRST * 2 ** (entry[2] - 1))
            entry[0], entry[1] = now, 0
        self._clients[pair] = entry
        while len(self._clients) > CLIENTS_KEPT:
            self._clients.popitem(last=False)

    def succeeded(self, client: str, key_name: str) -> None:
        """``client`` signed in with ``key_name``: the pair starts afresh, unless it is
        slowed (a guesser on the same machine stays slowed when its user signs in)."""
        if self.wait(client, key_name) <= 0:
            self._clients.pop((client, key_name), None)

    def __len__(self) -> int:
        return len(self._clients)


def visible(snapshot: dict[str, Any], rights: frozenset[str]) -> dict[str, Any]:
    """What a session with ``rights`` may see of the live snapshot: all of it with
    Manage; else names, kinds, counts and rates (no settings, no faults)."""
    if "Manage" in rights:
        return snapshot
    return {**snapshot, "namespaces": [
        {"name": ns["name"], "tier": ns["tier"], "entities": [
            {field: entity[field] for field in PUBLIC_FIELDS} for entity in ns["entities"]
        ]}
        for ns in snapshot["namespaces"]
    ]}
