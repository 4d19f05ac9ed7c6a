"""Names and paths of one sandbox: pure functions of its name, subnet and size.

Every name the sandbox creates on the host derives from the sandbox name, so that
``destroy`` can find leftovers by name alone when the on-disk record is missing:

- directory ``/tmp/rtk-sb-<name>/`` (keys, configs, logs, inventory, record);
- bridge ``rtkb-<name>`` holding ``<subnet>.1/24``;
- per node i (1-based): netns ``rtk-<name>-<i>``, host-side veth ``rtv-<name>-<i>``
  (its peer is ``eth0`` inside the netns), address ``<subnet>.<10+i>``, host ``node<i>``.

Linux limits interface names to 15 characters, hence names of at most 8 characters
and at most 64 nodes.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import SandboxError

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,7}$"
MAX_NODES = 64
ROOT = Path("/tmp")
DIR_PREFIX = "rtk-sb-"
RECORD_FILE = "sandbox.json"


def validate_name(name: str) -> str:
    """Return ``name`` when it can name a sandbox, else raise.

    Raises:
        SandboxError: The name is not 1-8 characters of a-z 0-9 _ - starting with a-z 0-9.
    """
    if not re.fullmatch(NAME_PATTERN, name):
        raise SandboxError(
            f"sandbox name {name!r} is not allowed: use 1-8 characters a-z 0-9 _ - "
            "starting with a letter or digit (it names network interfaces, which Linux "
            "limits to 15 characters)"
        )
    return name


def validate_subnet(subnet: str) -> str:
    """Return ``subnet`` (three octets such as ``10.77.0``) when it is a private /24.

    Raises:
        SandboxError: It is not three octets, or not inside 10/8, 172.16/12 or 192.168/16.
    """
    parts = subnet.split(".")
    if len(parts) != 3 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise SandboxError(f"subnet {subnet!r} is not three octets such as 10.77.0")
    subnet = ".".join(str(int(p)) for p in parts)
    network = ipaddress.IPv4Network(f"{subnet}.0/24")
    private = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
    if not any(network.subnet_of(ipaddress.IPv4Network(p)) for p in private):
        raise SandboxError(
            f"subnet {subnet!r} is not private: use one inside 10.0.0.0/8, 172.16.0.0/12 "
            "or 192.168.0.0/16, such as 10.77.0"
        )
    return subnet


def validate_nodes(nodes: int) -> int:
    """Return ``nodes`` when it is between 1 and ``MAX_NODES``.

    Raises:
        SandboxError: Too few or too many nodes.
    """
    if not 1 <= nodes <= MAX_NODES:
        raise SandboxError(f"a sandbox has 1 to {MAX_NODES} nodes, not {nodes}")
    return nodes


def sandbox_dir(name: str) -> Path:
    """The directory of sandbox ``name``."""
    return ROOT / f"{DIR_PREFIX}{name}"


def bridge_name(name: str) -> str:
    """The host bridge of sandbox ``name``."""
    return f"rtkb-{name}"


def netns_name(name: str, index: int) -> str:
    """The network namespace of node ``index`` (1-based)."""
    return f"rtk-{name}-{index}"


def veth_name(name: str, index: int) -> str:
    """The host-side veth of node ``index`` (1-based)."""
    return f"rtv-{name}-{index}"


def netns_pattern(name: str) -> re.Pattern[str]:
    """Matches exactly the netns names sandbox ``name`` creates."""
    return re.compile(rf"^rtk-{re.escape(name)}-\d+$")


def veth_pattern(name: str) -> re.Pattern[str]:
    """Matches exactly the host-side veth names sandbox ``name`` creates."""
    return re.compile(rf"^rtv-{re.escape(name)}-\d+$")


@dataclass(frozen=True)
class NodeLayout:
    """Where one node lives: its names, address and files."""

    index: int
    name: str
    address: str
    netns: str
    veth: str
    host_key: Path
    sshd_config: Path
    init_script: Path
    hosts_file: Path
    log_file: Path
    container_storage: Path


@dataclass(frozen=True)
class Layout:
    """Every name and path of one sandbox."""

    name: str
    subnet: str
    nodes: tuple[NodeLayout, ...]

    @classmethod
    def build(cls, name: str, subnet: str, nodes: int) -> Layout:
        """Validate the inputs and derive every name and path.

        Raises:
            SandboxError: An input is invalid.
        """
        name, subnet = validate_name(name), validate_subnet(subnet)
        directory = sandbox_dir(name)
        return cls(
            name=name,
            subnet=subnet,
            nodes=tuple(
                NodeLayout(
                    index=i,
                    name=f"node{i}",
                    address=f"{subnet}.{10 + i}",
                    netns=netns_name(name, i),
                    veth=veth_name(name, i),
                    host_key=directory / f"hostkey{i}",
                    sshd_config=directory / f"sshd{i}.conf",
                    init_script=directory / f"init{i}.sh",
                    hosts_file=directory / f"hosts{i}",
                    log_file=directory / f"node{i}.log",
                    container_storage=directory / f"containers{i}",
                )
                for i in range(1, validate_nodes(nodes) + 1)
            ),
        )

    @property
    def directory(self) -> Path:
        """The sandbox directory."""
        return sandbox_dir(self.name)

    @property
    def bridge(self) -> str:
        """The host bridge."""
        return bridge_name(self.name)

    @property
    def gateway(self) -> str:
        """The bridge's address, the nodes' default route."""
        return f"{self.subnet}.1"

    @property
    def key_path(self) -> Path:
        """The client's private key (its ``.pub`` is every node's authorized key)."""
        return self.directory / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        """The ``authorized_keys`` every node's sshd reads."""
        return self.directory / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        """Each node's address with its host key."""
        return self.directory / "known_hosts"

    @property
    def resolv_conf(self) -> Path:
        """The resolv.conf every node sees."""
        return self.directory / "resolv.conf"

    @property
    def inventory_path(self) -> Path:
        """The rtk inventory of the sandbox."""
        return self.directory / "inventory.yaml"

    @property
    def record_path(self) -> Path:
        """The record of everything created."""
        return self.directory / RECORD_FILE
