"""R-1 over AMQP through the official SDK (issue 15), in real time: the run of
tests/pairing/test_chaos.py with the primary served by ``aiosb serve``'s AMQP front end.
Nearly all of its half minute is the wall clock (the SDK times by it), so a pytest of its
own runs it beside the rest of the suite (tests/pairing/test_chaos_amqp_in_background.py).
"""

from __future__ import annotations

import pytest

import aiosb

from .test_chaos import ENTITIES, counting_amqp_transport, run


@pytest.mark.looptime(False)  # the official SDK times by the wall clock
@pytest.mark.timeout(240)
async def test_r1_holds_with_the_primary_on_amqp_through_the_official_sdk():
    """R-1 with the primary served by ``aiosb serve``'s AMQP front end and reached
    through :class:`~aiosb.transport.amqp.AmqpTransport` (the official SDK; issue 15):
    faults injected into the broker behind it reach the pairing runtime as the SDK
    reports them, and still no acknowledged message is lost, no refused one arrives and
    the backlog drains. Ten minutes of chaos compressed to thirty seconds."""
    pytest.importorskip("azure.servicebus")
    from aiosb.server.amqp import serve_amqp

    p_name, s_name = "chaos-amqp-p", "chaos-amqp-s"
    async with aiosb.connect(f"memory://{p_name}") as setup:
        for entity in ENTITIES:
            await setup.create_queue(entity)
    async with serve_amqp(namespace=p_name) as server:
        url = server.connection_string()
        transport = counting_amqp_transport(url)
        primary = aiosb.Namespace(transport, url=url, operation_timeout=2)
        async with primary, aiosb.connect(f"memory://{s_name}", operation_timeout=2) as secondary:
            await run(0, primary, secondary, p_name, scale=0.05, settle=60,
                      ambiguous=lambda: transport.given_up)
