"""Run the benchmarks: ``python -m benchmarks [NAME ...]`` (default: all)."""

from __future__ import annotations

import sys

from . import (
    amqp,
    amqp_load,
    http,
    memory,
    pairing,
    rules,
    s1_emulator,
    scaling,
    soak,
    spark,
    spark_read,
)

BENCHMARKS = {
    "s1": s1_emulator.main,
    "memory": memory.main,
    "pairing": pairing.main,
    "http": http.main,
    "amqp": amqp.main,
    "amqp-load": amqp_load.main,
    "rules": rules.main,
    "scaling": scaling.main,
    "spark": spark.main,
    "spark-read": spark_read.main,
    "soak": soak.main,
}


def main() -> None:
    names = sys.argv[1:] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    for name in names:
        BENCHMARKS[name]([])


if __name__ == "__main__":
    main()
