"""Issue 36: the AMQP front end fuzzed, the short run (the campaign is ``./dev fuzz``).

Two targets, both through :class:`~.harness.Target` (the real connection handler, its
findings as the harness's module says):

- structure-aware: SDK-like scripts mutated by hypothesis (:mod:`.strategies`), with
  tokens the server checks;
- the recorded sessions of the official SDK (``corpus/``), replayed whole and with bytes
  changed, with any signature taken so that they replay past their tokens' expiry.

Derandomized, so that the run is the same every time and a regression shows as one; the
campaign explores beyond it. Every finding's input goes into ``corpus/`` as
``finding-*.bin`` and is replayed here for good.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from .harness import Target, corpus_files
from .strategies import client_inputs, mutated_corpus

pytestmark = pytest.mark.timeout(300)

SHORT = settings(max_examples=600, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))


@pytest.fixture
def checked() -> Iterator[Target]:
    target = Target()
    yield target
    target.close()


@pytest.fixture
def replaying() -> Iterator[Target]:
    target = Target(any_signature=True)
    yield target
    target.close()


def test_the_recorded_sdk_sessions_replay_and_are_answered(replaying):
    """The corpus is what the SDK sends: each session replayed whole gets its OPEN
    answered and every link attached."""
    files = [f for f in corpus_files() if f.name.startswith("sdk-")]
    assert len(files) >= 6
    for path in files:
        answer = replaying.run(path.read_bytes())
        assert answer.startswith(b"AMQP\x03") and b"\x00\x53\x12" in answer, path.name


def test_every_finding_stays_fixed(replaying):
    for path in corpus_files():
        replaying.run(path.read_bytes())
    replaying.still_serves()


@SHORT
@given(data=client_inputs())
def test_structure_aware_inputs_find_nothing(checked, data):
    checked.run(data)


def test_a_good_client_is_served_after_the_structure_aware_run(checked):
    checked.still_serves()


CORPUS = [f.read_bytes() for f in corpus_files() if f.name.startswith("sdk-")]


@settings(SHORT, max_examples=400)
@given(data=mutated_corpus(CORPUS))
def test_mutated_sdk_sessions_find_nothing(replaying, data):
    replaying.run(data)


def test_a_good_client_is_served_after_the_mutation_run(replaying):
    replaying.still_serves()
