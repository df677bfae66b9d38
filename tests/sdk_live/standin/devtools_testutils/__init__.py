"""A stand-in for ``devtools_testutils``, the test helpers of Azure's SDK repository
(not on PyPI), so that the ``tests/`` of an ``azure-servicebus`` source distribution run,
unmodified, against ``aiosb serve`` (``./dev sdk-tests``, issue #47).

Only what those tests import is here, and it behaves as the real helpers do in live mode
(no recording, no test proxy): a preparer creates its resource, hands the test the
keyword arguments the resource gives, and removes it afterwards, or at the session's end
when cached. The "Azure Resource Manager" the preparers call (:mod:`._arm`) makes the
entities on ``aiosb serve`` with the SDK's own administration client; the credential that
stands for Microsoft Entra ID is the namespace's shared access key (the server checks
shared access signatures only).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import namedtuple

from ._preparers import AbstractPreparer, AzureMgmtPreparer, PowerShellPreparer
from .sanitizers import (
    add_general_regex_sanitizer,
    add_general_string_sanitizer,
    add_oauth_response_sanitizer,
    add_remove_header_sanitizer,
    set_custom_default_matcher,
)

__all__ = [
    "AbstractPreparer",
    "AzureMgmtPreparer",
    "AzureMgmtRecordedTestCase",
    "AzureRecordedTestCase",
    "AzureTestError",
    "CachedResourceGroupPreparer",
    "EnvironmentVariableLoader",
    "FakeResource",
    "PowerShellPreparer",
    "RandomNameResourceGroupPreparer",
    "ReservedResourceNameError",
    "add_general_regex_sanitizer",
    "add_general_string_sanitizer",
    "add_oauth_response_sanitizer",
    "add_remove_header_sanitizer",
    "get_credential",
    "get_region_override",
    "is_live",
    "recorded_by_proxy",
    "set_custom_default_matcher",
]

FakeResource = namedtuple("FakeResource", ["name", "id"])
EnvironmentVariableLoader = PowerShellPreparer


class AzureTestError(Exception):
    pass


class ReservedResourceNameError(AzureTestError):
    pass


class AzureRecordedTestCase:
    """The test classes' base, live: no recording, nothing scrubbed."""

    is_live = True
    in_recording = False
    test_resources_count = 0

    @property
    def settings(self):  # the real one reads mgmt_settings_real; nothing here needs it
        return None

    @staticmethod
    def await_prepared_test(test_fn):
        """An async test run to its end in a loop of its own (for the preparers)."""

        @functools.wraps(test_fn)
        def run(test_class_instance, *args, **kwargs):
            return asyncio.run(test_fn(test_class_instance, *args, **kwargs))

        return run

    def get_resource_name(self, name):
        return name

    def get_settings_value(self, key):
        return os.environ[f"AZURE_{key}"]


AzureMgmtRecordedTestCase = AzureRecordedTestCase


def is_live():
    return True


def get_region_override(default="westus"):
    return default


def get_credential(is_async=False, **kwargs):
    """What stands for ``DefaultAzureCredential``: the namespace's root key, as the SDK's
    own ``ServiceBusSharedKeyCredential`` (a token credential minting shared access
    signatures, which both the messaging and the administration clients take; the
    server checks shared access signatures only, not Microsoft Entra ID tokens)."""
    if is_async:
        from azure.servicebus.aio._base_handler_async import ServiceBusSharedKeyCredential
    else:
        from azure.servicebus._base_handler import ServiceBusSharedKeyCredential
    return ServiceBusSharedKeyCredential(os.environ["SERVICEBUS_SAS_POLICY"],
                                         os.environ["SERVICEBUS_SAS_KEY"])


def recorded_by_proxy(test_func):
    """Live: call the test with the keyword arguments it takes. No ``functools.wraps``,
    as in the real one: pytest must see ``(*args, **kwargs)``, not the test's own
    parameters (the preparers fill those, pytest does not)."""

    def record_wrap(*args, **kwargs):
        return test_func(*args, **_trim(test_func, kwargs))

    return record_wrap


def _trim(fn, kwargs):
    from ._preparers import trim_kwargs

    return trim_kwargs(fn, dict(kwargs))


def CachedResourceGroupPreparer(**kwargs):
    from ._preparers import ResourceGroupPreparer

    return ResourceGroupPreparer(use_cache=True, **kwargs)


def RandomNameResourceGroupPreparer(**kwargs):
    from ._preparers import ResourceGroupPreparer

    return ResourceGroupPreparer(**kwargs)
