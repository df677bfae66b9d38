"""The thread bridge: blocking calls into the async runtime from any thread (issue 12)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta

import pytest

from aiosb import Message, emulator, errors
from aiosb.bridge import Bridge
from aiosb.server.process import ServerProcess


@pytest.fixture
def bridge():
    with Bridge() as b:
        yield b


def _drain(bridge: Bridge, url: str, entity: str) -> list[str]:
    with bridge.connect(url) as ns, ns.receiver(entity, mode="receive_and_delete") as r:
        got: list[str] = []
        while batch := r.receive(max_messages=1000, max_wait=0):
            got.extend(m.body.decode() for m in batch)
        return got


def test_a_shared_sender_takes_sends_from_eight_threads_and_loses_none(bridge):
    with bridge.connect("memory://bridge") as ns:
        ns.create_queue("q")
    sender = bridge.sender("memory://bridge", "q")
    assert bridge.sender("memory://bridge", "q") is sender  # one per worker, cached

    def work(t: int) -> None:
        for i in range(200):
            if i % 2:
                sender.send(Message(f"{t}-{i}"))
            else:
                sender.send_soon(Message(f"{t}-{i}"))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sender.flush()
    got = _drain(bridge, "memory://bridge", "q")
    assert sorted(got) == sorted(f"{t}-{i}" for t in range(8) for i in range(200))


def test_blocking_calls_raise_the_same_errors_as_the_async_api(bridge):
    with bridge.connect("memory://bridge") as ns:
        with pytest.raises(errors.EntityNotFound):
            ns.get_queue("missing")
        ns.create_queue("q")
        with pytest.raises(errors.EntityAlreadyExists):
            ns.create_queue("q")
    with pytest.raises(errors.EntityNotFound):
        bridge.sender("memory://bridge", "missing").send(Message(b"x"))


def test_a_timeout_cancels_the_call_and_raises_operation_timeout(bridge):
    with pytest.raises(errors.OperationTimeout):
        bridge.run(asyncio.sleep(30), timeout=0.05)
    with bridge.connect("memory://bridge") as ns:
        ns.create_queue("q")
        emulator.namespace("bridge").faults.delay("q", 30)
        with pytest.raises(errors.OperationTimeout):
            bridge.sender("memory://bridge", "q").send(Message(b"x"), timeout=0.05)
        with pytest.raises(errors.InvalidArgument):
            bridge.run(asyncio.sleep(0), timeout=float("nan"))


def test_a_call_from_the_bridges_own_loop_thread_is_refused_not_a_deadlock(bridge):
    async def inside() -> None:
        bridge.run(asyncio.sleep(0))

    with pytest.raises(errors.InvalidOperation, match="own event loop thread"):
        bridge.run(inside(), timeout=5)


def test_a_thread_that_runs_its_own_loop_can_call_the_bridge(bridge):
    """As in a notebook: the caller's thread already runs an event loop."""

    async def notebook_cell() -> int:
        return bridge.run(asyncio.sleep(0, result=42))

    assert asyncio.run(notebook_cell()) == 42


def test_paired_sender_is_cached_per_pairing_and_fails_over(bridge):
    from aiosb import PairedNamespaceOptions

    with bridge.connect("memory://p1") as p, bridge.connect("memory://s1"):
        p.create_queue("q")
    options = PairedNamespaceOptions(
        backlog_queue_count=2,
        failover_interval=timedelta(0),
        ping_primary_interval=timedelta(seconds=1),
    )
    sender = bridge.sender("memory://p1", "q", secondary="memory://s1", options=options)
    assert sender.paired
    assert bridge.sender("memory://p1", "q", secondary="memory://s1", options=options) is sender
    with emulator.namespace("p1").faults.fail("q"):
        sender.send(Message(b"through the outage"))
    with bridge.connect("memory://s1") as secondary:
        backlog = [q.name for q in secondary.list_queues()]
        counts = [secondary.runtime_properties(q).active_message_count for q in backlog]
    assert len(backlog) == 2 and sum(counts) == 1


def test_closing_waits_for_sends_in_flight(bridge):
    with bridge.connect("memory://bridge") as ns:
        ns.create_queue("q")
    emulator.namespace("bridge").faults.delay("q", 0.3)
    sender = bridge.sender("memory://bridge", "q")
    futures = [sender.send_soon(Message(str(i))) for i in range(20)]
    bridge.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert bridge.closed
    with pytest.raises(errors.ClientClosed):
        bridge.run(asyncio.sleep(0))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_bridge_of_its_own():
    parent = Bridge.shared()
    parent_loop = parent._loop_thread
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            child = Bridge.shared()
            ok = child is not parent and child._pid == os.getpid()
            ok = ok and child.run(asyncio.sleep(0, result=7), timeout=5) == 7
            try:
                parent.run(asyncio.sleep(0))
            except errors.InvalidOperation:
                pass
            else:
                ok = False
            code = 0 if ok else 1
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"\x00"
    assert os.waitstatus_to_exitcode(status) == 0
    assert Bridge.shared() is parent and parent._loop_thread == parent_loop
    assert parent.run(asyncio.sleep(0, result=1), timeout=5) == 1


def test_interpreter_exit_flushes_sends_in_flight():
    """A script that starts sends and exits without waiting: they all land."""
    script = textwrap.dedent(
        """
        import sys
        from aiosb import Message
        from aiosb.bridge import Bridge
        url = sys.argv[1]
        sender = Bridge.shared().sender(url, "q")
        for i in range(500):
            sender.send_soon([Message(f"{i}-{j}") for j in range(10)])
        """
    )
    with ServerProcess() as server, Bridge() as bridge:
        url = f"{server.url}/exit"
        with bridge.connect(url) as ns:
            ns.create_queue("q")
            # Every send takes 0.5 s: the script ends long before its sends do.
            bridge.run(ns.transport.faults.delay("q", 0.5))
        done = subprocess.run(
            [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        with bridge.connect(url) as ns:
            bridge.run(ns.transport.faults.heal())
        assert len(_drain(bridge, url, "q")) == 5000


def test_flush_raises_what_a_send_soon_failed_with(bridge):
    with bridge.connect("memory://bridge") as ns:
        ns.create_queue("q")
    sender = bridge.sender("memory://bridge", "q")
    failed = sender.send_soon(Message(b"x" * 300_000))
    sender.send_soon(Message(b"fine"))
    with pytest.raises(errors.MessageSizeExceeded):
        sender.flush()
    assert isinstance(failed.exception(), errors.MessageSizeExceeded)
    sender.flush()  # reported once
    with pytest.raises(errors.MessageSizeExceeded):
        sender.send(Message(b"x" * 300_000))  # a blocking send raises its own error ...
    sender.flush()  # ... and flush does not raise it again


@pytest.mark.parametrize("call", ["flush", "close", "wait"])
def test_waiting_calls_from_the_loop_thread_are_refused_too(bridge, call):
    with bridge.connect("memory://bridge") as ns:
        ns.create_queue("q")
    sender = bridge.sender("memory://bridge", "q")
    emulator.namespace("bridge").faults.delay("q", 0.2)
    sender.send_soon(Message(b"x"))

    async def inside() -> None:
        if call == "flush":
            sender.flush()
        elif call == "close":
            sender.close()
        else:
            Bridge.wait(sender.send_soon(Message(b"y")))

    with pytest.raises(errors.InvalidOperation, match="own event loop thread"):
        bridge.run(inside(), timeout=5)
    assert bridge.run(asyncio.sleep(0, result="alive"), timeout=5) == "alive"
