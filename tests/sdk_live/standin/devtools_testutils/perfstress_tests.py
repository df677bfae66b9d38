"""``devtools_testutils.perfstress_tests``: what the SDK's perf tests import (not run)."""

from __future__ import annotations

import os


def get_random_bytes(size):
    return os.urandom(size)
