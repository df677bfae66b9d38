"""Fixtures for pairing tests: a primary and a secondary emulator namespace."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import timedelta
from types import SimpleNamespace

import pytest

import aiosb
from aiosb import Message, PairedNamespaceOptions, emulator

_names = itertools.count(1)


@pytest.fixture
async def env() -> AsyncIterator[SimpleNamespace]:
    """``env.primary``/``env.secondary`` (open namespaces), their brokers, and helpers."""
    n = next(_names)
    p_name, s_name = f"primary{n}", f"secondary{n}"
    async with aiosb.connect(f"memory://{p_name}", operation_timeout=10) as primary, \
            aiosb.connect(f"memory://{s_name}", operation_timeout=10) as secondary:
        await primary.create_queue("orders")
        await primary.create_queue("invoices")
        yield SimpleNamespace(
            primary=primary,
            secondary=secondary,
            p_broker=emulator.namespace(p_name),
            s_broker=emulator.namespace(s_name),
        )


def options(**kw) -> PairedNamespaceOptions:
    base = dict(
        backlog_queue_count=3,
        failover_interval=timedelta(seconds=60),
        ping_primary_interval=timedelta(seconds=30),
    )
    base.update(kw)
    return PairedNamespaceOptions(**base)


def syphon_options(**kw) -> PairedNamespaceOptions:
    """Options for syphon tests: fail over at once, ping every 10 s, syphon on."""
    base = dict(
        failover_interval=timedelta(0),
        ping_primary_interval=timedelta(seconds=10),
        enable_syphon=True,
    )
    base.update(kw)
    return options(**base)


async def drain(ns, entity, sub_queue=None) -> list:
    """Receive and delete everything in ``entity``."""
    out = []
    async with ns.receiver(entity, mode="receive_and_delete", sub_queue=sub_queue) as receiver:
        while batch := await receiver.receive(max_messages=100, max_wait=0):
            out.extend(batch)
    return out


async def backlog_contents(env, paired) -> list:
    out = []
    for path in paired._rotation.paths:
        async with env.secondary.receiver(path) as receiver:
            out.extend(await receiver.peek(1000, from_sequence_number=0))
    return out


def msgs(*bodies: str, **kw) -> list[Message]:
    return [Message(b, **kw) for b in bodies]
