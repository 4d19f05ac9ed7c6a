"""Host ranges (``gpu[01-16]``): any text expands or is refused, and compression round-trips.

- ``expand_hosts`` on any text gives at most ``MAX_HOSTS`` names, none empty or
  with whitespace, or raises ``HostRangeError`` (one line) quickly: no pattern makes
  it build billions of names first;
- ``compress_hosts`` of any list of names gives a hostlist that ``expand_hosts``
  reads back into the same names, duplicates gone, each group in number order;
- ``fit_hostlist`` stays within its width and keeps brackets balanced.
"""

from __future__ import annotations

import time

from hostile_input import examples, hostile_text
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.inventory.hostrange import (
    MAX_HOSTS,
    HostRangeError,
    compress_hosts,
    expand_hosts,
    fit_hostlist,
)

RANGE_PARTS = st.one_of(
    st.sampled_from(["n", "gpu", "-", ".", "a1b", "", ",", "[", "]", "-", " "]),
    st.integers(0, 70000).map(str),
    st.builds(
        lambda a, b, pad: f"[{str(a).zfill(pad)}-{str(b).zfill(pad)}]",
        st.integers(0, 70000),
        st.integers(0, 70000),
        st.integers(0, 6),
    ),
    st.lists(st.integers(0, 99).map(str), min_size=1, max_size=4).map(lambda v: f"[{','.join(v)}]"),
    hostile_text(8),
)


@settings(max_examples=examples(150))
@given(st.one_of(hostile_text(60), st.lists(RANGE_PARTS, max_size=6).map("".join)))
def test_any_pattern_expands_within_the_limit_or_is_refused_in_one_line(pattern: str) -> None:
    started = time.monotonic()
    try:
        hosts = expand_hosts(pattern)
    except HostRangeError as e:
        assert str(e) and "\n" not in str(e), str(e)
        return
    finally:
        assert time.monotonic() - started < 5.0, "too slow: expanded before checking the size"
    assert 1 <= len(hosts) <= MAX_HOSTS
    assert all(host and not any(c.isspace() for c in host) for host in hosts)


NAMES = st.one_of(
    st.builds(
        lambda prefix, number, width: f"{prefix}{str(number).zfill(width)}",
        st.sampled_from(["n", "gpu", "rack1-n", "a.b"]),
        st.integers(0, 2000),
        st.integers(0, 5),
    ),
    st.sampled_from(["login", "head", "x-y"]),
)


@settings(max_examples=examples(150))
@given(st.lists(NAMES, min_size=1, max_size=40))
def test_a_compressed_hostlist_expands_to_the_same_names(names: list[str]) -> None:
    text = compress_hosts(names)
    assert sorted(expand_hosts(text)) == sorted(set(names))
    fitted = fit_hostlist(names, max_chars=40)
    assert len(fitted) <= 44 and fitted.count("[") == fitted.count("]")
