"""``aiosb demo``: failover and recovery, end to end, on the embedded emulator, told as it
happens, ended with a verdict from what the receiver saw, and drawn as a picture to
share (SVG always; PNG too where matplotlib is installed: ``pip install aiosb[plot]``)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from . import emulator
from .client import connect
from .message import Message

__all__ = ["DRAIN_SECONDS", "Run", "demo", "picture_png", "timeline", "timeline_svg"]

#: How long the demo waits for the syphon to bring the backlog home.
DRAIN_SECONDS = 30.0
_LANES = (("P", "to the primary", "#2b7bb9"), ("B", "to the backlog", "#e0892b"),
          ("S", "moved home by the syphon", "#3a9d5d"))


def _say(text: str) -> None:
    print(text, flush=True)


@dataclass
class Run:
    """What happened in a demo run, in seconds from its start."""

    where: list[tuple[float, str]] = field(default_factory=list)  # (sent at, "P" | "B")
    moved: list[float] = field(default_factory=list)  # syphon moves
    events: list[tuple[float, str]] = field(default_factory=list)  # (at, failover | ...)
    outage: tuple[float, float] = (0.0, 0.0)
    total: float = 0.0


async def demo(
    orders: int = 160, interval: float = 0.05, outage: tuple[float, float] = (2.0, 5.0),
    svg: str | None = "aiosb-demo-timeline.svg", png: str | None = None,
) -> dict[str, int]:
    """Failover and recovery, end to end, on the embedded emulator.

    A sender sends ``orders`` messages, one every ``interval`` seconds, to a primary
    queue paired with a secondary namespace; the primary queue is down during
    ``outage`` (seconds from the start). Sends fail over to the backlog, pings find the
    primary back, and the syphon moves the backlog home. The verdict counts what a
    receiver of the primary queue saw. Returns the final counts.
    """
    from .pairing import PairedNamespaceOptions

    broker = emulator.namespace("contoso")
    broker.faults.heal()
    happened = Run(outage=outage)
    async with connect("memory://contoso", operation_timeout=5) as primary, connect(
        "memory://fabrikam", operation_timeout=5
    ) as secondary:
        if await primary.queue_exists("orders"):
            await primary.delete_queue("orders")
        await primary.create_queue("orders", requires_duplicate_detection=True)
        options = PairedNamespaceOptions(
            backlog_queue_count=4,
            failover_interval=timedelta(seconds=1),
            ping_primary_interval=timedelta(seconds=1),
            enable_syphon=True,
        )
        loop = asyncio.get_running_loop()
        start = loop.time()

        def at() -> str:
            return f"[{loop.time() - start:5.2f}s]"

        _say(f"{at()} memory://contoso/orders paired with memory://fabrikam "
             "(failover 1 s, ping 1 s, syphon on)")
        async with primary.pair(secondary, options) as paired:
            where, moved = happened.where, happened.moved
            expected = [orders]  # backlog sends to see moved home; known once all are sent
            drained = asyncio.Event()

            async def watch() -> None:
                async for event in paired.events():
                    now = loop.time() - start
                    if event.kind == "syphon_moved":
                        moved.extend([now] * event.count)
                        if len(moved) >= expected[0]:
                            drained.set()
                    if event.kind in ("failover", "recovered"):
                        happened.events.append((now, event.kind))
                    if event.kind in ("suspect", "failover", "recovered", "syphon_moved"):
                        _say(f"{at()} {event.kind:<13} {event.detail}")

            async with asyncio.TaskGroup() as owned:  # the watcher ends with the demo
                watcher = owned.create_task(watch())

                def down() -> None:
                    broker.faults.fail("orders")
                    _say(f"{at()} outage        contoso/orders goes down")

                def up() -> None:
                    broker.faults.heal()
                    _say(f"{at()} heal          contoso/orders is back")

                loop.call_later(outage[0], down)
                loop.call_later(outage[1], up)
                async with paired.sender("orders") as sender:
                    for i in range(orders):
                        await asyncio.sleep(max(0.0, start + i * interval - loop.time()))
                        before = paired.stats.backlog_sends
                        # Its slot, or later: the loop runs a timer up to its clock's
                        # resolution early, so the clock may read just before the slot
                        # (and the outage, due at the same instant, may have run first).
                        sent_at = max(loop.time() - start, i * interval)
                        await sender.send(Message(f"order {i}".encode(), message_id=f"order-{i}"))
                        went = "B" if paired.stats.backlog_sends > before else "P"
                        where.append((sent_at, went))
                expected[0] = sum(1 for _, w in where if w == "B")
                if len(moved) >= expected[0]:
                    drained.set()
                try:
                    async with asyncio.timeout(DRAIN_SECONDS):
                        await drained.wait()
                except TimeoutError:
                    _say(f"{at()} the syphon had not moved everything home after "
                         f"{DRAIN_SECONDS:g} s; counting what arrived")
                stats = paired.stats
                watcher.cancel()
        seen: list[str | None] = []  # every message the receiver got, duplicates kept
        async with primary.receiver("orders", mode="receive_and_delete") as receiver:
            while batch := await receiver.receive(max_messages=100, max_wait=0):
                seen.extend(m.message_id for m in batch)
    sent_ids = {f"order-{i}" for i in range(orders)}
    arrived = sent_ids & set(seen)
    report = {
        "sent": orders,
        "to_primary": sum(1 for _, w in where if w == "P"),
        "to_backlog": sum(1 for _, w in where if w == "B"),
        "moved_home": stats.syphon_moved,
        "arrived": len(arrived),
        "lost": len(sent_ids - arrived),
        "duplicates": len(seen) - len(set(seen)),
    }
    happened.total = max(t for t, _ in where) + interval
    _say("\n" + timeline(where, moved, outage, happened.total))
    if svg:
        await asyncio.to_thread(Path(svg).write_text, timeline_svg(happened), encoding="utf-8")
        _say(f"(timeline picture written to {svg})")
    if png:
        written = await asyncio.to_thread(picture_png, happened, png)
        _say(f"(timeline picture written to {png})" if written else
             "(no PNG: matplotlib is not installed; pip install aiosb[plot])")
    _say("\nreport")
    for key, value in report.items():
        _say(f"  {key:<12} {value:>6}")
    _say(f"\n{verdict(report)}")
    return report


def verdict(report: dict[str, int]) -> str:
    """The one line a reader can trust: from what the receiver saw."""
    return (f"{report['sent']} sent, {report['arrived']} arrived, {report['lost']} lost, "
            f"{report['duplicates']} duplicates")


def timeline(
    where: list[tuple[float, str]], moved: list[float], outage: tuple[float, float], total: float
) -> str:
    """A text picture: where each send went over time, the outage, the syphon."""
    width = 64
    step = total / width

    def row(marks: list[float], char: str) -> str:
        cells = ["."] * width
        for t in marks:
            cells[min(int(t / step), width - 1)] = char
        return "".join(cells)

    down = "".join("#" if outage[0] <= (i + 0.5) * step < outage[1] else "_" for i in range(width))
    # Each label is the time at the left edge of its column, to a tenth of a second
    # (whole seconds cut it short by up to one: the picture's marks drifted off it).
    scale = "".join(f"{i * step:.1f}s".ljust(8) for i in range(0, width, 8))[:width]
    return "\n".join(
        [
            f"{'time':<9}{scale}",
            f"{'outage':<9}{down}",
            f"{'primary':<9}{row([t for t, w in where if w == 'P'], 'P')}",
            f"{'backlog':<9}{row([t for t, w in where if w == 'B'], 'B')}",
            f"{'syphon':<9}{row(moved, 'S')}",
        ]
    )


def rates(happened: Run, bin_seconds: float = 0.5) -> dict[str, list[tuple[float, float]]]:
    """Messages per second in each bin of time, per destination lane (``P``, ``B``,
    ``S``): the throughput the picture draws."""
    bins = max(1, int(happened.total / bin_seconds) + 1)
    marks = {"P": [t for t, w in happened.where if w == "P"],
             "B": [t for t, w in happened.where if w == "B"], "S": happened.moved}
    out = {}
    for lane, times in marks.items():
        counts = collections.Counter(min(int(t / bin_seconds), bins - 1) for t in times)
        out[lane] = [(i * bin_seconds, counts.get(i, 0) / bin_seconds) for i in range(bins)]
    return out


def timeline_svg(happened: Run) -> str:
    """The picture to share: throughput over time per destination, the outage shaded,
    failover and recovery marked, with a title, axes in units and a legend."""
    width, height = 900, 380
    left, right, top, bottom = 70, 880, 70, 320
    total = max(happened.total, 1e-9)
    lanes = rates(happened)
    peak = max([r for series in lanes.values() for _, r in series] + [1.0])
    peak = _nice(peak)

    def x(t: float) -> float:
        return left + t / total * (right - left)

    def y(rate: float) -> float:
        return bottom - rate / peak * (bottom - top)

    first, last = happened.outage
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">'
        f"aiosb: sends through a {last - first:g} s outage of the primary queue</text>",
        f'<rect x="{x(first):.1f}" y="{top}" width="{x(last) - x(first):.1f}" '
        f'height="{bottom - top}" fill="#f3d6d6"/>',
        f'<text x="{x(first) + 4:.1f}" y="{top + 14}" fill="#a33">primary down</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>',
        f'<text x="{(left + right) / 2}" y="{bottom + 38}" text-anchor="middle">'
        "time since start (s)</text>",
        f'<text x="18" y="{(top + bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 18 {(top + bottom) / 2})">messages per second</text>',
    ]
    step = 1 if total <= 20 else 5
    for second in range(0, int(total) + 1, step):
        parts.append(f'<line x1="{x(second):.1f}" y1="{bottom}" x2="{x(second):.1f}" '
                     f'y2="{bottom + 5}" stroke="#333"/>')
        parts.append(f'<text x="{x(second):.1f}" y="{bottom + 18}" '
                     f'text-anchor="middle">{second}</text>')
    for i in range(5):
        rate = peak * i / 4
        parts.append(f'<text x="{left - 6}" y="{y(rate) + 4:.1f}" text-anchor="end">'
                     f"{rate:g}</text>")
        parts.append(f'<line x1="{left}" y1="{y(rate):.1f}" x2="{right}" y2="{y(rate):.1f}" '
                     'stroke="#ddd"/>')
    for at, kind in happened.events:
        parts.append(f'<line x1="{x(at):.1f}" y1="{top}" x2="{x(at):.1f}" y2="{bottom}" '
                     'stroke="#555" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{x(at) + 3:.1f}" y="{top - 6}" fill="#555">{kind}</text>')
    for lane, label, colour in _LANES:
        points = " ".join(f"{x(t):.1f},{y(r):.1f} {x(t + 0.5):.1f},{y(r):.1f}"
                          for t, r in lanes[lane])
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                     f'stroke-width="2"><title>{label}</title></polyline>')
    for i, (_, label, colour) in enumerate(_LANES):
        ly = height - 22
        lx = left + i * 260
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="18" height="4" fill="{colour}"/>')
        parts.append(f'<text x="{lx + 24}" y="{ly - 4}">{label}</text>')
    for t, lane in [(t, w) for t, w in happened.where] + [(t, "S") for t in happened.moved]:
        colour = dict((k, c) for k, _, c in _LANES)[lane]
        parts.append(f'<line x1="{x(t):.1f}" y1="{bottom - 6}" x2="{x(t):.1f}" '
                     f'y2="{bottom}" stroke="{colour}"/>')  # one tick per message
    parts.append("</svg>")
    return "\n".join(parts)


def _nice(value: float) -> float:
    """A round number at or above ``value`` for the top of an axis."""
    for nice in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000):
        if value <= nice:
            return float(nice)
    return float(value)


def picture_png(happened: Run, path: str) -> bool:
    """Draw the picture as PNG with matplotlib; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(10, 4.2), dpi=120, facecolor="white")
    first, last = happened.outage
    ax.axvspan(first, last, color="#f3d6d6", label="primary down")
    for lane, label, colour in _LANES:
        series = rates(happened)[lane]
        ax.step([t for t, _ in series], [r for _, r in series], where="post", color=colour,
                linewidth=2, label=label)
    for at, kind in happened.events:
        ax.axvline(at, color="#555", linestyle="--", linewidth=1)
        ax.annotate(kind, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", color="#555")
    ax.set_title(f"aiosb: sends through a {last - first:g} s outage of the primary queue")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("messages per second")
    ax.set_xlim(0, happened.total)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right")
    ax.grid(axis="y", color="#ddd")
    fig.tight_layout()
    fig.savefig(path, facecolor="white")
    plt.close(fig)
    return True
