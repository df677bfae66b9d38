"""``devtools_testutils.aio``: the async form of ``recorded_by_proxy`` (see the package)."""

from __future__ import annotations

from ._preparers import trim_kwargs

__all__ = ["recorded_by_proxy_async"]


def recorded_by_proxy_async(test_func):
    async def record_wrap(*args, **kwargs):
        return await test_func(*args, **trim_kwargs(test_func, dict(kwargs)))

    return record_wrap
