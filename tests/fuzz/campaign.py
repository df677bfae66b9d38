"""The fuzz campaign of the AMQP front end: ``./dev fuzz [SECONDS]`` (#36, #48).

Three parts, each in a process of its own, the time shared between them. Two are
coverage-guided with atheris (libFuzzer for Python; installed on first use), over the
same in-process target as the test command's short run (:mod:`.harness`: the listener
of ``serve_amqp``, then AMQP):

- ``raw``: libFuzzer mutates client byte streams, starting from the corpus (what the
  official SDKs send, and every past finding), keeping each input that reaches new
  code; the target takes any signature, so recorded sessions replay.
- ``structured``: libFuzzer drives the hypothesis strategies (:mod:`.strategies`),
  its coverage choosing which choice sequences to mutate.

The third goes through the front door (:mod:`.front_door`, #48): ``aiosb serve`` in a
process of its own, fed hypothesis's :func:`.doors.plans` (the first-byte router, TLS on
both ports, the HTTP hand-off, AMQP over WebSockets, raw AMQP; random, not
coverage-guided: the server is another process), and every :data:`ROUND` seconds checked,
the same server, for the official client served over AMQP, AMQPS and WebSockets, and for
descriptors, tasks and memory given back. A finding there is printed as hypothesis's
falsifying plan, shrunk.

A finding of the first two stops its part and is written to
``tests/fuzz/corpus/finding-crash-*``: give it a name that says what it found, fix the
code, and the test command replays it for good. New interesting inputs go to a work
folder (``$TMPDIR/aiosb-fuzz``), not the repository. Without atheris (no wheel for this
Python), those two run hypothesis alone, random but not coverage-guided, and say so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"
WORK = Path(tempfile.gettempdir()) / "aiosb-fuzz"


#: Seconds between the front door's checks of the server it fuzzes.
ROUND = 60


def _front_door(seconds: int) -> None:
    """The front door: rounds of plans, each followed by the same-server checks."""
    import asyncio
    import time

    from hypothesis import HealthCheck, given, settings

    from tests.fuzz.doors import WARM_UP, plans
    from tests.fuzz.front_door import Served

    with Served.start() as served:
        asyncio.run(served.entities())
        for plan in WARM_UP:
            served.run(plan)
        served.still_serves()
        before = served.footprint()
        end = time.monotonic() + seconds
        rate = 10.0  # inputs a second, measured as the rounds go

        def fuzz(examples: int) -> None:
            @settings(deadline=None, database=None, max_examples=examples,
                      suppress_health_check=list(HealthCheck))
            @given(plans())
            def run(plan) -> None:  # type: ignore[no-untyped-def]
                served.run(plan)

            run()

        first = True
        while (left := end - time.monotonic()) > 1:
            started, runs = time.monotonic(), served.runs
            fuzz(max(10, int(rate * min(ROUND, left))))
            rate = (served.runs - runs) / max(0.1, time.monotonic() - started)
            served.check_after(before)
            if first:  # memory is measured from the end of the first round: ended AMQP
                # connections wait for the cyclic collector, and what they held is reused
                # rather than given back, so the server's resident size rises, then levels
                before, first = (*before[:2], served.rss()), False
            print(f"aiosb fuzz: front-door: {served.runs} connections; the server still "
                  "serves the official client, and gave back descriptors, tasks and "
                  "memory", flush=True)


def _one(kind: str, seconds: int) -> None:
    """One part, in this process (libFuzzer exits the process when it ends)."""
    if kind == "front-door":
        _front_door(seconds)
        return
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None:
        with atheris.instrument_imports(include=["aiosb"]):
            from tests.fuzz import harness, strategies
    else:
        from tests.fuzz import harness, strategies
    target = harness.Target(any_signature=kind == "raw")
    if kind == "raw":
        def one_input(data: bytes) -> None:
            target.run(data)
    else:
        from hypothesis import HealthCheck, given, settings

        @settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(strategies.client_inputs())
        def structured(data: bytes) -> None:
            target.run(data)

        one_input = structured.hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    if atheris is None:
        import time

        from hypothesis import HealthCheck, given, settings

        print(f"aiosb fuzz: atheris is not installed for this Python: {kind} runs "
              "hypothesis alone (random, not coverage-guided)", flush=True)
        source = strategies.client_inputs() if kind != "raw" else strategies.mutated_corpus(
            [p.read_bytes() for p in harness.corpus_files()])
        deadline = time.monotonic() + seconds

        @settings(deadline=None, database=None, max_examples=10**9,
                  suppress_health_check=list(HealthCheck))
        @given(source)
        def run(data: bytes) -> None:
            if time.monotonic() > deadline:
                raise _Done
            target.run(data)

        try:
            run()
        except _Done:
            pass
        print(f"aiosb fuzz: {kind}: {target.runs} inputs, no finding", flush=True)
        return
    work = WORK / kind
    work.mkdir(parents=True, exist_ok=True)
    if kind == "raw":
        for seed in harness.corpus_files():
            shutil.copy(seed, work / seed.name)
    args = [sys.argv[0], f"-max_total_time={seconds}", "-timeout=20", "-rss_limit_mb=4096",
            "-max_len=65536", "-len_control=0" if kind == "structured" else "-len_control=100",
            f"-artifact_prefix={CORPUS}/finding-", "-print_final_stats=1", str(work)]
    atheris.Setup(args, one_input)
    atheris.Fuzz()


class _Done(Exception):
    pass


#: The campaign's parts, in the order they run.
PARTS = ("raw", "structured", "front-door")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("seconds", nargs="?", type=int, default=300,
                        help="how long the campaign runs, its three parts together")
    parser.add_argument("--one", choices=PARTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        _one(args.one, args.seconds)
        return 0
    try:
        import atheris  # noqa: F401
    except ImportError:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", "atheris"], check=False)
        if done.returncode:
            print("aiosb fuzz: atheris could not be installed; running hypothesis alone",
                  file=sys.stderr)
    failed = 0
    share = args.seconds // len(PARTS)
    for kind in PARTS:
        print(f"aiosb fuzz: {kind} for {share} s", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "tests.fuzz.campaign", "--one", kind, str(share)],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False,
        )
        if done.returncode:
            failed += 1
            where = "the plan above" if kind == "front-door" else f"{CORPUS}/finding-*"
            print(f"aiosb fuzz: {kind} found something (exit {done.returncode}); see "
                  f"{where}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
