"""The preparers, as the real ``devtools_testutils`` runs them live.

A preparer decorates a test: before it runs, :meth:`create_resource` makes the resource
and returns keyword arguments for the test (and for the preparers inside it); after it,
:meth:`remove_resource` removes it, unless cached (``use_cache``): then one resource serves
every test with the same stack of preparers and settings, and is removed at the session's
end. A coroutine test is run with ``asyncio.run`` inside the (synchronous) wrapper.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import random
import string
import threading
from typing import ClassVar

from ._arm import FakeArmClient

_log = logging.getLogger(__name__)


def trim_kwargs(fn, kwargs):
    """Only the keyword arguments ``fn`` takes (all, if it takes ``**kwargs`` or is a
    preparer's wrapper)."""
    if getattr(fn, "__is_preparer", False):
        return kwargs
    spec = inspect.getfullargspec(fn)
    if spec.varkw is not None:
        return kwargs
    names = set(spec.args) | set(spec.kwonlyargs)
    return {k: v for k, v in kwargs.items() if k in names}


class AbstractPreparer:
    _lock = threading.Lock()
    #: Cached resources: the stack's key -> (name, keyword arguments, preparer).
    _cache: ClassVar[dict] = {}

    def __init__(self, name_prefix, name_len, disable_recording=False):
        self.name_prefix = name_prefix
        self.name_len = name_len
        self.resource_moniker = None
        self.resource_random_name = None
        self.test_class_instance = None
        self.live_test = True
        self.disable_recording = disable_recording
        self._cache_key = (type(self).__name__,)
        self._use_cache = False

    def set_cache(self, enabled, *args):
        self._cache_key = (type(self).__name__, *map(repr, args))
        self._use_cache = enabled

    @property
    def moniker(self):
        if not self.resource_moniker:
            self.resource_moniker = self.name_prefix
        return self.resource_moniker

    def create_random_name(self):
        padding = max(4, self.name_len - len(self.name_prefix))
        return self.name_prefix + "".join(random.choice(string.ascii_lowercase)
                                          for _ in range(padding))

    @property
    def random_name(self):
        if not self.resource_random_name:
            self.resource_random_name = self.create_random_name()
        return self.resource_random_name

    def create_resource(self, name, **kwargs):
        return {}

    def remove_resource(self, name, **kwargs):
        pass

    def __call__(self, fn):
        def _preparer_wrapper(test_class_instance, **kwargs):
            child_cached = getattr(fn, "__use_cache", False)
            use_cache = self._use_cache or child_cached
            key = (self._cache_key, kwargs.get("__aggregate_cache_key"))
            kwargs["__aggregate_cache_key"] = key
            self.test_class_instance = test_class_instance
            with self._lock:
                cached = self._cache.get(key) if use_cache else None
            if cached is not None:
                name, made, _ = cached
                kwargs = {**made, **kwargs}
            else:
                name = self.resource_random_name = self.create_random_name()
                kwargs.update(self.create_resource(name, **kwargs) or {})
                if use_cache:
                    with self._lock:
                        self._cache[key] = (name, dict(kwargs), self)
            try:
                call = trim_kwargs(fn, dict(kwargs))
                if inspect.iscoroutinefunction(fn):
                    asyncio.run(fn(test_class_instance, **call))
                else:
                    fn(test_class_instance, **call)
            finally:
                if not use_cache:
                    self.remove_resource(name, **kwargs)

        # The flags by string: inside a class, ``wrapper.__flag`` would be name-mangled.
        functools.update_wrapper(_preparer_wrapper, fn)
        setattr(_preparer_wrapper, "__is_preparer", True)
        if use_cache_below := (self._use_cache or getattr(fn, "__use_cache", False)):
            setattr(_preparer_wrapper, "__use_cache", use_cache_below)
        return _preparer_wrapper

    @classmethod
    def remove_cached(cls):
        """At the session's end: remove what cached preparers made, innermost first."""
        for name, kwargs, preparer in reversed(list(cls._cache.values())):
            try:
                preparer.remove_resource(name, **kwargs)
            except Exception as exc:  # as the real one: leave as little behind as it can
                _log.warning("removing cached %s: %s", name, exc)
        cls._cache.clear()


class AzureMgmtPreparer(AbstractPreparer):
    def __init__(self, name_prefix, random_name_length, disable_recording=True,
                 playback_fake_resource=None, client_kwargs=None, random_name_enabled=False):
        super().__init__(name_prefix, random_name_length, disable_recording=disable_recording)
        self.client = None
        self.resource = playback_fake_resource
        self.client_kwargs = client_kwargs or {}
        self.random_name_enabled = random_name_enabled

    @property
    def is_live(self):
        return True

    def create_mgmt_client(self, client_class, **kwargs):
        """Azure Resource Manager's client, whichever was asked for: here, the one
        stand-in that makes everything on ``aiosb serve`` (:mod:`._arm`)."""
        return FakeArmClient()


class PowerShellPreparer(AzureMgmtPreparer):
    """The values of a pre-provisioned namespace, from the environment (``SERVICEBUS_*``,
    upper-cased names of the keyword arguments), as the real loader reads them live."""

    def __init__(self, directory, name_prefix="", disable_recording=True, client_kwargs=None,
                 random_name_enabled=False, use_cache=True, preparers=None, **kwargs):
        super().__init__(name_prefix, 24, disable_recording=disable_recording,
                         client_kwargs=client_kwargs, random_name_enabled=random_name_enabled)
        self.directory = directory
        self.needed = [key for key in kwargs if directory in key]

    def create_resource(self, name, **kwargs):
        return {key.lower(): os.environ[key.upper()] for key in self.needed}


class ResourceGroupPreparer(AzureMgmtPreparer):
    def __init__(self, name_prefix="", use_cache=False, parameter_name="resource_group",
                 parameter_name_for_location="location", location="westus", **kwargs):
        super().__init__(name_prefix, 75)
        self.parameter_name = parameter_name
        self.parameter_name_for_location = parameter_name_for_location
        self.location = location
        self.set_cache(use_cache, parameter_name, name_prefix)

    def create_resource(self, name, **kwargs):
        return {self.parameter_name: FakeArmClient().resource_groups.create_or_update(name, {}),
                self.parameter_name_for_location: self.location}
