"""One SparkSession and one ``aiosb serve`` process for every Spark test.

Spark runs on ``local[2,4]``: two cores, as on ``local[2]``, and up to four attempts per
task, so that a task failed on purpose is retried as on a cluster (plain ``local[N]``
never retries). Java 17 is on every machine here: without it these tests fail, with a
sentence saying so, rather than skip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys

import pytest

from aiosb.bridge import Bridge
from aiosb.server.process import ServerProcess

pytestmark = pytest.mark.spark
_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("the Spark tests need Java 17 on the PATH (or JAVA_HOME); none was found.")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv's pyarrow
    from pyspark.sql import SparkSession

    import aiosb.spark

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("aiosb-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    aiosb.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def server():
    with ServerProcess() as served:
        yield served


@pytest.fixture
def url(server) -> str:
    """A fresh namespace of the shared server for each test."""
    return f"{server.url}/spark{next(_names)}"


@pytest.fixture(scope="session")
def bridge():
    with Bridge() as b:
        yield b
