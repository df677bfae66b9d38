"""The fuzz campaign of the AMQP front end: ``./dev fuzz [SECONDS]`` (#36).

Coverage-guided with atheris (libFuzzer for Python; installed on first use), over the
same target as the test command's short run (:mod:`.harness`), in two halves, each in a
process of its own:

- ``raw``: libFuzzer mutates client byte streams, starting from the corpus (what the
  official SDKs send, and every past finding), keeping each input that reaches new
  code; the target takes any signature, so recorded sessions replay.
- ``structured``: libFuzzer drives the hypothesis strategies (:mod:`.strategies`),
  its coverage choosing which choice sequences to mutate.

A finding stops its half and is written to ``tests/fuzz/corpus/finding-crash-*``: give it
a name that says what it found, fix the code, and the test command replays it for good.
New interesting inputs go to a work folder (``$TMPDIR/aiosb-fuzz``), not the repository.
Without atheris (no wheel for this Python), the halves run hypothesis alone, random but
not coverage-guided, and say so.
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


def _one(kind: str, seconds: int) -> None:
    """One half, in this process (libFuzzer exits the process when it ends)."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("seconds", nargs="?", type=int, default=300,
                        help="how long the campaign runs, both halves together")
    parser.add_argument("--one", choices=("raw", "structured"), help=argparse.SUPPRESS)
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
    for kind in ("raw", "structured"):
        print(f"aiosb fuzz: {kind} for {args.seconds // 2} s", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "tests.fuzz.campaign", "--one", kind, str(args.seconds // 2)],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False,
        )
        if done.returncode:
            failed += 1
            print(f"aiosb fuzz: {kind} found something (exit {done.returncode}); see "
                  f"{CORPUS}/finding-*", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
