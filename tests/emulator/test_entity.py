"""An entity alone (aiosb.emulator._entity): taking a message in (forward, fan out,
store), dead-lettering, duplicate detection and the idle timer, over a fake namespace.
Time is passed in explicitly."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiosb import Message
from aiosb.emulator._entity import _Entity
from aiosb.emulator._partitions import fragment_of, home
from aiosb.emulator._record import INF, _Ids, _Record, record_of
from aiosb.entities import QueueProperties, SubscriptionProperties, TopicProperties


class Host:
    """The namespace, as an entity sees it: a timer, ids, the entity table."""

    name = "ns"
    tier = "standard"
    journal = None

    def __init__(self) -> None:
        self._ids = _Ids()
        self._entities: dict[str, _Entity] = {}
        self.registered: list[tuple[float, Any]] = []

    def _register(self, when: float, target: Any) -> None:
        self.registered.append((when, target))

    def add(self, kind: str, props: Any, nfrag: int = 1, path: str | None = None) -> _Entity:
        entity = _Entity(self, kind, path or props.name, props.normalised(), 0.0, nfrag)
        self._entities[entity.key] = entity
        return entity


def record(name: str = "m", key: str | None = None, **fields: Any) -> _Record:
    rec = record_of(Message(name.encode(), **fields), name, 10)
    rec.key = key if key is not None else fields.get("session_id")
    return rec


def held(entity: _Entity) -> list[str]:
    return [r.message_id for s in entity.main_stores() for r in s.records.values()]


def dead(entity: _Entity) -> list[tuple[str, str | None]]:
    return [(r.message_id, r.dl_reason) for s in entity.dlqs for r in s.records.values()]


def test_a_forwarded_message_keeps_its_key_into_a_partitioned_target() -> None:
    """PT-19: forwarding from a plain queue into a partitioned one: the message lands in
    its key's fragment there, numbered by that fragment."""
    ns = Host()
    target = ns.add("queue", QueueProperties("target", enable_partitioning=True), nfrag=16)
    source = ns.add("queue", QueueProperties("source", forward_to="target"))
    rec = record(key="order-42")
    source.deliver(rec, now=0.0, hops=0)
    assert held(source) == [] and held(target) == ["m"]
    assert fragment_of(rec.seq, 16) == home("order-42", 16)
    assert rec.seq in target.fragments[home("order-42", 16)].records


def test_a_forwarding_loop_ends_after_four_hops_in_a_dead_letter_queue() -> None:
    """#47: as on Service Bus, a message forwarded four times is dead-lettered where it
    is, with the reason MaxTransferHopCountExceeded."""
    ns = Host()
    a = ns.add("queue", QueueProperties("a", forward_to="b"))
    b = ns.add("queue", QueueProperties("b", forward_to="a"))
    a.deliver(record(), now=0.0, hops=0)  # a -> b -> a -> b -> a: dead-lettered there
    assert (held(a), held(b), dead(b)) == ([], [], [])
    assert dead(a) == [("m", "MaxTransferHopCountExceeded")]


def test_an_entity_forwarding_to_itself_dead_letters_after_four_hops() -> None:
    """#47: Service Bus lets an entity forward to itself (Microsoft's own tests set it);
    a message then goes round four times and is dead-lettered, even when its dead
    letters are forwarded to itself too (they are not forwarded again)."""
    ns = Host()
    loop = ns.add("queue", QueueProperties("loop", forward_to="loop",
                                           forward_dead_lettered_messages_to="loop"))
    loop.deliver(record(), now=0.0, hops=0)
    assert (held(loop), dead(loop)) == ([], [("m", "MaxTransferHopCountExceeded")])


def test_a_message_without_a_session_forwarded_to_a_session_queue_is_dead_lettered() -> None:
    ns = Host()
    target = ns.add("queue", QueueProperties("sq", requires_session=True))
    ns.add("queue", QueueProperties("src", forward_to="sq")).deliver(record(), 0.0, 0)
    assert held(target) == [] and dead(target) == [("m", "SessionIdIsMissing")]


def test_a_session_message_goes_to_its_sessions_store_in_its_home_fragment() -> None:
    """PT-6: the session id is the key; the session's store is in its fragment."""
    ns = Host()
    sq = ns.add("queue", QueueProperties("sq", requires_session=True, enable_partitioning=True), 16)
    rec = record(session_id="cart")
    rec.frag = home("cart", 16)
    sq.deliver(rec, 0.0, 0)
    session = sq.sessions["cart"]
    assert session.store.fragment == home("cart", 16) == fragment_of(rec.seq, 16)
    assert list(session.store.records.values()) == [rec]
    assert all(not f.records for f in sq.fragments)  # they hold scheduled ones only


def test_a_topic_gives_each_subscription_a_copy_of_its_own() -> None:
    ns = Host()
    topic = ns.add("topic", TopicProperties("t"))
    subs = []
    for name in ("s1", "s2", "s3"):
        sub = ns.add("subscription", SubscriptionProperties(name, topic_name="t"), path=f"t/{name}")
        sub.topic = topic
        topic.subscriptions[sub.key] = sub
        subs.append(sub)
    topic.deliver(record(application_properties={"n": 1}), 0.0, 0)
    copies = [next(iter(s.fragments[0].records.values())) for s in subs]
    assert len({id(c) for c in copies}) == 3
    first = copies[0].props
    assert first is not None
    first["n"] = 2  # a change to one (a defer's properties) stays in it
    assert [(c.props or {})["n"] for c in copies] == [2, 1, 1]


def test_dead_letters_forward_where_the_entity_says_and_never_expire() -> None:
    ns = Host()
    target = ns.add("queue", QueueProperties("dlq-sink"))
    source = ns.add("queue", QueueProperties("q", forward_dead_lettered_messages_to="dlq-sink"))
    rec = record(time_to_live=timedelta(seconds=5))
    rec.expires = 6.0
    source.dead_letter(0, rec, "why", "because", now=1.0)
    (copy,) = target.fragments[0].records.values()
    assert (copy.dl_reason, copy.dl_desc, copy.dl_source) == ("why", "because", "q")
    assert copy.ttl == INF and copy.expires is None and dead(source) == []
    target.dead_letter(0, rec, "why", None, now=1.0)  # no forwarding: its own queue
    (kept,) = target.dlqs[0].records.values()
    assert kept.expires is None and dead(target) == [("m", "why")]


def test_a_message_id_is_a_duplicate_within_the_window_only() -> None:
    ns = Host()
    q = ns.add(
        "queue",
        QueueProperties(
            "q",
            requires_duplicate_detection=True,
            duplicate_detection_history_time_window=timedelta(seconds=60),
        ),
    )
    assert not q.is_duplicate("a", now=0.0)
    assert q.is_duplicate("a", now=59.999)
    assert not q.is_duplicate("a", now=60.0)  # forgotten as the window ends
    assert q.is_duplicate("a", now=61.0)  # seen again at 60


def test_an_idle_entity_deletes_itself_unless_it_forwards() -> None:
    """EX-14: deleted after auto_delete_on_idle without activity; EX-16: a queue that
    forwards counts as busy."""
    ns = Host()
    idle = timedelta(minutes=5)
    ns.add("queue", QueueProperties("sink"))
    q = ns.add("queue", QueueProperties("q", auto_delete_on_idle=idle))
    fwd = ns.add("queue", QueueProperties("fwd", auto_delete_on_idle=idle, forward_to="sink"))
    assert (300.0, q) in ns.registered and (300.0, fwd) in ns.registered
    q.touch(100.0)
    q.on_due(300.0)  # touched since: not idle yet, the timer is armed again
    assert not q.deleted and (400.0, q) in ns.registered
    q.on_due(400.0)
    fwd.on_due(300.0)
    assert q.deleted and "q" not in ns._entities
    assert not fwd.deleted and "fwd" in ns._entities
