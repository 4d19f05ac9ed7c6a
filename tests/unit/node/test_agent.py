"""``agent.py``'s route to the head where the node has no ``ip`` command.

A GPU VM image without iproute2 (seen on the first GPU machine: ``rtk up --local``
stopped at "no interface toward the head was found") must still name the interface:
the one owning the address the kernel picks toward the head, asked with an ioctl.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit.node import agent


def test_without_ip_the_route_to_this_node_is_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ip` on it
    route = agent.route_to("localhost", None)
    assert route["head_ip"] == "127.0.0.1"
    assert route["source_ip"] == "127.0.0.1"
    assert route["interface"] == "lo"
    assert agent.probe("localhost", str(tmp_path / "m"), "")["network"]["interface"] == "lo"


def test_without_ip_each_address_maps_to_the_interface_ip_names() -> None:
    found = agent.ipv4_addresses()
    assert found.get("lo") == "127.0.0.1"
    ip = shutil.which("ip")
    if ip is None:
        return
    out = subprocess.run([ip, "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    listed = {line.split()[1]: line.split()[3].split("/")[0] for line in out.splitlines()}
    for name, address in found.items():
        assert listed.get(name) == address, (name, address, listed)


def test_an_interface_given_is_kept_without_ip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert agent.route_to("localhost", "eth9")["interface"] == "eth9"
