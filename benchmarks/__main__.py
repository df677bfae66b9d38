"""Run the benchmarks: ``python -m benchmarks [NAME ...] [--FLAG ...]`` (default: all);
flags after the names go to each benchmark named (``./dev bench http --durable-only``)."""

from __future__ import annotations

import sys

from . import (
    amqp,
    amqp_load,
    http,
    memory,
    pairing,
    processes,
    rules,
    s1_emulator,
    scaling,
    soak,
    spark,
    spark_read,
    timeline,
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
    "processes": processes.main,
    "timeline": timeline.main,
}


def main() -> None:
    args = sys.argv[1:]
    first_flag = next((i for i, arg in enumerate(args) if arg.startswith("-")), len(args))
    names, flags = args[:first_flag] or list(BENCHMARKS), args[first_flag:]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    for name in names:
        BENCHMARKS[name](flags)


if __name__ == "__main__":
    main()
