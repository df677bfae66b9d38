"""The ``"aiosb"`` Spark data source, found by Spark in every session.

Spark registers the ``DefaultSource`` of every installed module named ``pyspark_*``
when a format it does not know is first used (SPARK-45917), so ``format("aiosb")``
works in any SparkSession, a new one or one of another thread included, without
:func:`aiosb.spark.register` (which registers it on one session only, SPARK-45600).
"""

from aiosb.spark import AiosbDataSource as DefaultSource

__all__ = ["DefaultSource"]
