"""Checks that need the whole inventory, and resolution into ``Inventory``.

Every problem found is collected (not just the first), each with its key path and
line, so a user fixes a file in one pass.
"""

from __future__ import annotations

import getpass
import os
import posixpath
import re
import sys
from collections.abc import Callable
from pathlib import Path

from toolkit.errors import InventoryError, Problem
from toolkit.inventory.container import (
    CONTAINER_RAY,
    check_complete,
    check_container,
    merge_container,
)
from toolkit.inventory.hostrange import HostRangeError, expand_hosts
from toolkit.inventory.models import InventorySpec, NodeSettings, NodeSpec, PortSettings
from toolkit.inventory.problems import format_path
from toolkit.inventory.resolved import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_SSH_PORT,
    Inventory,
    Node,
    SshTarget,
)
from toolkit.inventory.yamlmap import KeyPath

# Linux's default net.ipv4.ip_local_port_range; preflight checks each node's real one.
EPHEMERAL_PORTS = (32768, 60999)
# Ray puts unix sockets at <temp_dir>/session_<date>_<time>_<pid>/sockets/plasma_store,
# about 58 characters below temp_dir, and a socket path may hold at most 107.
MAX_TEMP_DIR_CHARS = 48
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")

Locate = Callable[[KeyPath], int | None]


class _Collector:
    def __init__(self, source: str, locate: Locate) -> None:
        self.source = source
        self.locate = locate
        self.problems: list[Problem] = []

    def add(self, path: KeyPath, message: str) -> None:
        self.problems.append(Problem(self.source, self.locate(path), format_path(path), message))


def resolve(spec: InventorySpec, source: str, base_dir: Path, locate: Locate) -> Inventory:
    """Check cross-key rules and build the resolved inventory.

    Args:
        spec: The shape-checked file.
        source: File name for messages.
        base_dir: Directory relative key paths are resolved against.
        locate: Maps a key path to its line.

    Returns:
        The resolved inventory.

    Raises:
        toolkit.errors.InventoryError: One or more problems, all listed.
    """
    out = _Collector(source, locate)
    nodes = _expand_nodes(spec, base_dir, out)
    _check_ports(spec.ports, out)
    _check_ray(spec, out)
    names = [n.name for n in nodes]
    head = spec.head or (names[0] if names else "")
    if spec.head is not None and names and spec.head not in names:
        out.add(("head",), f"got {spec.head!r}; the head must be one of the nodes: {_list(names)}")
    if spec.min_nodes is not None and spec.min_nodes > len(names):
        out.add(("min_nodes",), f"got {spec.min_nodes}; the inventory has only {len(names)} nodes")
    if spec.transport == "local" and len(names) > 1:
        out.add(
            ("transport",),
            f"got 'local' with {len(names)} nodes; local runs exactly one "
            "node on this machine (use transport: ssh for more)",
        )
    if out.problems:
        raise InventoryError(sorted(out.problems, key=lambda p: (p.line or 0, p.path)))
    return Inventory(
        name=spec.cluster,
        transport=spec.transport,
        nodes=tuple(nodes),
        head_name=head,
        min_nodes=spec.min_nodes or len(nodes),
        network=spec.network,
        ports=spec.ports,
        ray=spec.ray,
        slurm=spec.slurm,
        source=source,
        fanout=spec.fanout,
    )


def _expand_nodes(spec: InventorySpec, base_dir: Path, out: _Collector) -> list[Node]:
    nodes: list[Node] = []
    seen_host: dict[str, int] = {}
    seen_address: dict[str, int] = {}
    key_checked: set[str] = set()
    said: set[str] = set()
    _check_settings(spec.defaults, ("defaults",), base_dir, out, key_checked)
    for index, entry in enumerate(spec.nodes):
        where: KeyPath = ("nodes", index)
        _check_settings(entry, where, base_dir, out, key_checked)
        _check_resources(entry, where, out)
        check_complete(spec.defaults.container, entry.container, where, out.add, said)
        pairs = _host_address_pairs(entry, where, out)
        for host, address in pairs:
            if host in seen_host:
                out.add(
                    (*where, "host"),
                    f"host {host!r} is listed twice (first in nodes"
                    f"[{seen_host[host]}]); each host may appear once",
                )
                continue
            if address in seen_address:
                out.add(
                    (*where, "address"),
                    f"address {address!r} of {host!r} is also the "
                    f"address of nodes[{seen_address[address]}]; give each node its own",
                )
                continue
            seen_host[host] = index
            seen_address[address] = index
            nodes.append(_node(spec, entry, host, address, base_dir))
    return nodes


def _host_address_pairs(entry: NodeSpec, where: KeyPath, out: _Collector) -> list[tuple[str, str]]:
    try:
        hosts = expand_hosts(entry.host)
    except HostRangeError as e:
        out.add((*where, "host"), f"got {entry.host!r}; {e} (write ranges like gpu[01-16])")
        return []
    bad = next((h for h in hosts if not HOST_NAME.fullmatch(h)), None)
    if bad is not None:
        out.add(
            (*where, "host"),
            f"got {bad!r}; a host name is letters, digits, '.', '-', '_' and ':' (ranges in [..])",
        )
        return []
    if entry.address is None:
        return [(h, h) for h in hosts]
    try:
        addresses = expand_hosts(entry.address)
    except HostRangeError as e:
        out.add((*where, "address"), f"got {entry.address!r}; {e}")
        return []
    bad = next((a for a in addresses if not HOST_NAME.fullmatch(a)), None)
    if bad is not None:
        out.add((*where, "address"), f"got {bad!r}; an address is an IP or a DNS name")
        return []
    if len(addresses) != len(hosts):
        out.add(
            (*where, "address"),
            f"got {entry.address!r} ({len(addresses)} addresses) for "
            f"{len(hosts)} hosts; give a range of the same length, or omit address "
            "to use the host names",
        )
        return []
    return list(zip(hosts, addresses, strict=True))


def _check_settings(
    settings: NodeSettings, where: KeyPath, base_dir: Path, out: _Collector, checked: set[str]
) -> None:
    if settings.venv is not None and settings.python is not None:
        out.add(
            (*where, "python"),
            "give either venv or python, not both (venv implies <venv>/bin/python)",
        )
    check_container(settings.container, where, out.add)
    key = settings.ssh.key
    if key is not None and key not in checked:
        checked.add(key)
        path = _local_path(key, base_dir)
        if not path.is_file():
            out.add(
                (*where, "ssh", "key"),
                f"got {key!r}; no such file ({path}); give the "
                "private key's path, absolute or relative to the inventory file",
            )


def _check_resources(entry: NodeSpec, where: KeyPath, out: _Collector) -> None:
    for name in entry.resources:
        if name in RESERVED_RESOURCES:
            hint = {"CPU": "cpus", "GPU": "gpus"}.get(name)
            instead = f"use the node's '{hint}' key" if hint else "Ray sets it itself"
            out.add((*where, "resources", name), f"'{name}' is a built-in Ray resource; {instead}")


def _check_ports(ports: PortSettings, out: _Collector) -> None:
    fixed = {name: value for name, value in ports if name not in ("min_worker", "max_worker")}
    owner: dict[int, str] = {}
    for name, value in fixed.items():
        if value in owner:
            out.add(
                ("ports", name),
                f"port {value} is also ports.{owner[value]}; every Ray port must differ",
            )
        else:
            owner[value] = name
    low, high = ports.min_worker, ports.max_worker
    if low > high:
        out.add(("ports", "max_worker"), f"got {high}, below ports.min_worker {low}")
        return
    for name, value in fixed.items():
        if low <= value <= high:
            out.add(
                ("ports", name),
                f"port {value} lies inside the worker range {low}-{high}; move it or the range",
            )
    eph_low, eph_high = EPHEMERAL_PORTS
    for name, value in dict(fixed, min_worker=low, max_worker=high).items():
        if eph_low <= value <= eph_high:
            out.add(
                ("ports", name),
                f"port {value} lies in Linux's ephemeral range "
                f"{eph_low}-{eph_high}, where the kernel hands out random ports and Ray "
                "collides with them; choose a port below 32768",
            )
    if low <= eph_low <= high:
        out.add(
            ("ports", "max_worker"),
            f"worker range {low}-{high} overlaps the ephemeral range {eph_low}-{eph_high}",
        )


def _check_ray(spec: InventorySpec, out: _Collector) -> None:
    temp_dir = spec.ray.temp_dir
    if temp_dir is None:
        return
    if not temp_dir.isprintable():
        out.add(
            ("ray", "temp_dir"),
            f"got {temp_dir!r}; a path of printable characters only (no newline or tab)",
        )
    elif not posixpath.isabs(temp_dir):
        out.add(("ray", "temp_dir"), f"got {temp_dir!r}; give an absolute path such as /tmp/rtk")
    elif len(temp_dir) > MAX_TEMP_DIR_CHARS:
        out.add(
            ("ray", "temp_dir"),
            f"got {temp_dir!r} ({len(temp_dir)} characters); at most "
            f"{MAX_TEMP_DIR_CHARS}, because Ray's unix socket paths below it are limited "
            "to 107 characters",
        )
    elif posixpath.normpath(temp_dir) in ("/", "/tmp", "/var", "/home", "/root"):
        out.add(
            ("ray", "temp_dir"),
            f"got {temp_dir!r}; rtk removes this directory on down, "
            "so give one of its own, such as /tmp/rtk-mycluster",
        )


def _node(spec: InventorySpec, entry: NodeSpec, host: str, address: str, base: Path) -> Node:
    defaults = spec.defaults
    ssh_d, ssh_n = defaults.ssh, entry.ssh

    def pick(name: str) -> object:
        value = getattr(ssh_n, name)
        return getattr(ssh_d, name) if value is None else value

    key = pick("key")
    venv = entry.venv or (defaults.venv if entry.python is None else None)
    python = entry.python or (None if entry.venv else defaults.python)
    if venv is not None:
        python = posixpath.join(venv, "bin", "python")
    # On this machine, default to the Python running rtk: the one that has Ray.
    python = python or (sys.executable if spec.transport == "local" else "python3")
    container = merge_container(defaults.container, entry.container)
    ray_exe = entry.ray or defaults.ray
    # In a container, Ray is the image's: python names the host's, for rtk's node scripts.
    default_ray = CONTAINER_RAY if container else (python, "-m", "ray.scripts.scripts")
    ray = (ray_exe,) if ray_exe else default_ray
    port = pick("port")
    timeout = pick("connect_timeout_s")
    return Node(
        name=host,
        address=address,
        gpus=entry.gpus,
        cpus=entry.cpus,
        resources=dict(entry.resources),
        ssh=SshTarget(
            user=str(pick("user") or getpass.getuser()),
            port=int(port) if isinstance(port, int) else DEFAULT_SSH_PORT,
            key_file=str(_local_path(str(key), base)) if key else None,
            jump_host=str(pick("jump_host")) if pick("jump_host") else None,
            known_hosts=str(_local_path(str(pick("known_hosts") or "~/.ssh/known_hosts"), base)),
            connect_timeout_s=float(timeout)
            if isinstance(timeout, float | int)
            else DEFAULT_CONNECT_TIMEOUT_S,
            accept_new_host_keys=bool(pick("accept_new_host_keys")),
        ),
        python=python,
        ray=ray,
        env={**defaults.env, **entry.env},
        container=container,
    )


def _local_path(path: str, base: Path) -> Path:
    # os.path's expanduser leaves ~nosuchuser as written; Path's raises RuntimeError.
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() else base / expanded


def _list(names: list[str]) -> str:
    shown = ", ".join(names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")
