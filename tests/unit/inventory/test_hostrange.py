from __future__ import annotations

import re

import pytest

from toolkit.inventory import HostRangeError, expand_hosts
from toolkit.inventory.hostrange import name_ranges


@pytest.mark.parametrize(
    ("pattern", "hosts"),
    [
        ("node1", ["node1"]),
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[1-3]", ["gpu1", "gpu2", "gpu3"]),
        ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
        ("n[1-2,5,7-8]", ["n1", "n2", "n5", "n7", "n8"]),
        ("r[1-2]-g[1-2]", ["r1-g1", "r1-g2", "r2-g1", "r2-g2"]),
        ("gpu[01-02],login1", ["gpu01", "gpu02", "login1"]),
        ("10.0.0.[10-12]", ["10.0.0.10", "10.0.0.11", "10.0.0.12"]),
        ("gpu[7]", ["gpu7"]),
        ("x[098-101]", ["x098", "x099", "x100", "x101"]),
    ],
)
def test_expand(pattern: str, hosts: list[str]) -> None:
    assert expand_hosts(pattern) == hosts


def test_expand_sixteen_keeps_padding() -> None:
    hosts = expand_hosts("gpu[01-16]")
    assert len(hosts) == 16
    assert hosts[0] == "gpu01"
    assert hosts[-1] == "gpu16"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("gpu[]", "empty brackets"),
        ("gpu[5-3]", "runs backwards"),
        ("gpu[01-03", "without a matching ']'"),
        ("gpu01-03]", "without a matching '['"),
        ("gpu[a-c]", "is not a number"),
        ("gpu[[1-2]]", "nested"),
        ("gpu01,,gpu02", "empty host name"),
        ("gpu 01", "whitespace"),
        ("gpu[1-100000]", "larger than"),
    ],
)
def test_bad_patterns(pattern: str, message: str) -> None:
    with pytest.raises(HostRangeError, match=re.escape(message)):
        expand_hosts(pattern)


def test_name_ranges() -> None:
    names = [f"node{i:03d}" for i in range(1, 61)] + ["node062", "gpu-a", "gpu-b"]
    assert name_ranges(names) == "node001-node060, node062, gpu-a, gpu-b"
    assert name_ranges(["a9", "a10", "a11"]) == "a9, a10-a11"  # widths differ: not one run
    cut = name_ranges([f"n{i}" for i in range(0, 100, 2)], max_chars=20)
    assert cut.endswith(", ...") and len(cut) <= 25


def test_name_ranges_of_an_expanded_hostlist() -> None:
    hosts = expand_hosts("gpu[01-16,18,20-21]")
    assert name_ranges(hosts) == "gpu01-gpu16, gpu18, gpu20-gpu21"


@pytest.mark.parametrize(
    "pattern",
    [
        "n[0-65535][0-65535]",  # each bracket fits; their product (4 billion) must not run
        "n[1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2][1-2]",
        "n[" + ",".join(["0-60000"] * 50) + "]",  # one bracket of many ranges
    ],
)
def test_a_pattern_past_the_host_limit_is_refused_before_it_is_expanded(pattern: str) -> None:
    with pytest.raises(HostRangeError, match="larger than 65536 hosts|more than 65536 hosts"):
        expand_hosts(pattern)


@pytest.mark.parametrize(
    "pattern",
    ["n[1-" + "9" * 5000 + "]", "n[" + "1" * 19 + "]", "n[\u0663]", "n[\u0660-\u0663]"],
)
def test_only_short_ascii_numbers_are_numbers(pattern: str) -> None:
    # 5,000 digits made int() raise ValueError; other scripts' digits passed \d.
    with pytest.raises(HostRangeError, match="is not a number or a range"):
        expand_hosts(pattern)
