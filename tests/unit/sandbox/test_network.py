"""The sandbox's network: what ``ip -j`` lists, read as interfaces and their addresses."""

from __future__ import annotations

import json

import pytest

from toolkit.errors import SandboxError
from toolkit.sandbox.network import Link, parse_links

# ``ip -j -4 addr show`` as iproute2 6.1 prints it (trimmed); ``{}`` as older ones
# print for an interface without an IPv4 address.
ADDR_SHOW = [
    {
        "ifindex": 1,
        "ifname": "lo",
        "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
    },
    {},
    {
        "ifindex": 4,
        "ifname": "rtkbr0",
        "addr_info": [
            {"family": "inet", "local": "10.10.0.1", "prefixlen": 24},
            {"family": "inet", "local": "10.10.1.1", "prefixlen": 16},
        ],
    },
]


def test_addresses_read_as_address_and_prefix() -> None:
    assert parse_links(json.dumps(ADDR_SHOW)) == [
        Link("lo", ("127.0.0.1/8",)),
        Link("rtkbr0", ("10.10.0.1/24", "10.10.1.1/16")),
    ]


def test_links_without_addresses_and_empty_output() -> None:
    assert parse_links('[{"ifindex": 2, "ifname": "eth0", "mtu": 1500}]') == [Link("eth0")]
    assert parse_links("") == []
    assert parse_links("\n") == []


def test_an_interface_or_address_without_its_fields_is_a_sandbox_error() -> None:
    with pytest.raises(SandboxError, match="an interface without a name"):
        parse_links('[{"ifindex": 2}]')
    with pytest.raises(SandboxError, match="lo: an address without local or prefixlen"):
        parse_links('[{"ifname": "lo", "addr_info": [{"family": "inet"}]}]')
