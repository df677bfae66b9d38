"""Hypothesis strategies for messages, shared by the property-based tests."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone

from hypothesis import strategies as st

#: Short text of any Unicode (lone surrogates included).
text = st.text(max_size=12)
#: An id: none, or text up to just over the 128 character limit.
ids = st.none() | st.text(max_size=130)
#: An application property value of every type a Message takes, edge values included.
value = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), text,
    st.binary(max_size=10), st.uuids(),
    st.timedeltas(min_value=timedelta(days=-999), max_value=timedelta(days=999)),
    st.datetimes(timezones=st.just(UTC) | st.just(timezone(timedelta(hours=-3)))),
)
