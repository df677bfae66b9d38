"""Issue 17: the README's Spark block runs (and, #38, each Spark block of the docs),
against the session's ``aiosb serve``, with the queues it names made afresh first (as a
reader's would be) and its streaming query stopped once it has moved what there was.
Afresh, because a stopped stream leaves its last micro-batch to be read again (at least
once, as docs/spark.md says), and the next block would read it."""

from __future__ import annotations

from pathlib import Path

import pytest
from readme_blocks import SERVER, Block, of_kind

import aiosb


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", of_kind("spark"), ids=str)
def test_the_spark_block_runs(block: Block, spark, server, bridge, tmp_path: Path):
    for name in ("orders", "audit"):
        bridge.run(_fresh_queue(f"{server.url}/contoso", name))
    events = spark.range(50).selectExpr("cast(id as string) as body")
    code = block.code.replace(SERVER, server.url).replace("/tmp/ck", str(tmp_path / "ck"))
    names: dict[str, object] = {"spark": spark, "events": events}
    exec(block.with_code(code).compiled(), names)
    query = names["query"]
    query.processAllAvailable()  # type: ignore[attr-defined]
    query.stop()  # type: ignore[attr-defined]
    audit = bridge.run(_count(f"{server.url}/contoso", "audit"))
    assert audit == 50  # the 50 events, written to orders, streamed on to audit


async def _fresh_queue(url: str, name: str) -> None:
    async with aiosb.connect(url) as ns:
        if await ns.queue_exists(name):
            await ns.delete_queue(name)
        await ns.create_queue(name)


async def _count(url: str, name: str) -> int:
    async with aiosb.connect(url) as ns:
        return (await ns.runtime_properties(name)).active_message_count
