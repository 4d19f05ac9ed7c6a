"""What rtk's node scripts share: their ``main``, the RDMA ports' files, rtk's digest.

Standard library only, like the scripts. A script takes what it needs with one plain
line, ``from toolkit.node.common import NAME, ...``, which works wherever the script
is imported (the tests; rtk itself imports ``source_digest`` and ``read_port_files``
from here). When a script is sent to a node, ``toolkit.nodeinfo.script.assemble``
puts this file's text in front of the script's and drops that line, so the node's
Python needs no rtk. A script must not define a name this file defines (the assembly
refuses it), so every name here says what it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

USAGE_EXIT = 2  # the command line is not one the script takes
FAILED_EXIT = 3  # the script ran and failed; its answer's "error" says why


class UsageError(Exception):
    """The command line is not one the script takes (exit ``USAGE_EXIT``)."""


class ScriptError(Exception):
    """A failure the script explains in its own words (exit ``FAILED_EXIT``).

    The message is the answer's ``error`` as it is (no exception type in front of it),
    and ``result`` what was done before the failure, sent along in the answer.
    """

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result or {}


def run_main(call: Callable[[], dict[str, Any]]) -> int:
    """Print ``call()``'s answer as one JSON line, never a traceback; the exit status.

    0 with the answer; ``USAGE_EXIT`` with ``{"error": "usage: ..."}`` on a
    ``UsageError``; ``FAILED_EXIT`` with ``{"error": MESSAGE, "result": ...}`` on a
    ``ScriptError`` and ``{"error": "TYPE: MESSAGE"}`` on any other exception.
    """
    try:
        answer = call()
    except UsageError as e:
        return _print_answer({"error": f"usage: {e}"}, USAGE_EXIT)
    except ScriptError as e:
        return _print_answer({"error": str(e), "result": e.result}, FAILED_EXIT)
    except Exception as e:  # noqa: BLE001 - reported to rtk as data, never a traceback
        return _print_answer({"error": f"{type(e).__name__}: {e}"}, FAILED_EXIT)
    return _print_answer(answer, 0)


def run_command(
    script: str, commands: Mapping[str, Callable[..., dict[str, Any]]], argv: list[str]
) -> int:
    """``run_main`` for a script of commands: ``argv[0]`` names one, the rest are its args."""

    def call() -> dict[str, Any]:
        if not argv or argv[0] not in commands:
            raise UsageError(f"{script} {'|'.join(commands)} ARGS")
        return commands[argv[0]](*argv[1:])

    return run_main(call)


def _print_answer(answer: dict[str, Any], code: int) -> int:
    print(json.dumps(answer))
    return code


def sorted_names(path: str) -> list[str]:
    """The names in a directory, sorted; none when it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def as_text(value: str | bytes) -> str:
    """A string that some libraries (older pynvml) hand out as bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


# -- the RDMA ports' files: read on the node, parsed on the host
# (toolkit.preflight.history.ib_ports)

SYS_INFINIBAND = "sys/class/infiniband"
IB_PORT_FILES = ("state", "phys_state", "rate", "link_layer")
# Counters that only grow on a bad link, and the largest value each can hold (the
# kernel's PMA counter widths: 16, 8 and 4 bits); port_xmit_discards is left out
# because congestion alone raises it.
IB_COUNTER_MAX: dict[str, int] = {
    "symbol_error": 0xFFFF,
    "link_error_recovery": 0xFF,
    "link_downed": 0xFF,
    "port_rcv_errors": 0xFFFF,
    "port_rcv_remote_physical_errors": 0xFFFF,
    "local_link_integrity_errors": 0xF,
    "excessive_buffer_overrun_errors": 0xF,
}
IB_PORTS_MAX = 64
IB_VALUE_MAX_CHARS = 80


def read_port_files(root: str = "/") -> dict[str, str]:
    """Every RDMA port's state, rate, link layer and error counters, as raw text.

    Walks ``<root>/sys/class/infiniband/<hca>/ports/<n>/``; keyed ``mlx5_0/1/state``
    and ``mlx5_0/1/counters/symbol_error`` (what ``toolkit.preflight.history.ib_ports.parse_ports``
    reads); empty without RDMA devices. A file that cannot be read (some counters
    refuse on RoCE ports) is left out; at most ``IB_PORTS_MAX`` ports.
    """
    base = os.path.join(root, SYS_INFINIBAND)
    names = [*IB_PORT_FILES, *(f"counters/{c}" for c in IB_COUNTER_MAX)]
    found: dict[str, str] = {}
    seen = 0
    for hca in sorted_names(base):
        ports = os.path.join(base, hca, "ports")
        for port in sorted_names(ports):
            seen += 1
            if seen > IB_PORTS_MAX:
                return found
            for name in names:
                try:
                    with open(os.path.join(ports, port, name)) as f:
                        found[f"{hca}/{port}/{name}"] = f.read(IB_VALUE_MAX_CHARS).strip()
                except (OSError, UnicodeDecodeError):
                    continue
    return found


# -- rtk's source on a node ------------------------------------------------------------


def source_digest(root: str) -> str:
    """One digest of a package's source files: their paths under ``root`` and bytes.

    Compiled files and ``__pycache__`` are left out. The host digests its own copy of
    rtk with this same function, so two copies with equal digests run the same code.
    """
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


# --- What Ray needs of a node before it starts (the probe) and after it failed (startdiag).

# File systems that are not the node's own: Ray's temp dir holds unix sockets and a
# session directory per node, which a shared or network file system breaks (two nodes'
# raylet sockets at one path, sockets that cannot be made on NFS).
NETWORK_FS_TYPES = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "9p",
    "virtiofs",
    "fuse",
)
TEMP_HOSTS_DIR = "rtk/hosts"  # each host that probed the temp dir leaves its name here
# The GPU settings to put back (gpu_control.py's restore file), under Ray's temp dir:
# rtk profile --restore, the power policies (toolkit.power.node_power), rtk up's probe.
GPU_RESTORE_FILE = "rtk/gpu-restore.json"
MOUNTINFO = "/proc/self/mountinfo"


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> dict[str, Any]:
    """The mount ``path`` lies on: its mount point, file system type and read-only flag."""
    best: dict[str, Any] = {"mount_point": None, "fs_type": None, "read_only": None}
    real = os.path.realpath(path)
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return best
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 6 or not tail:
            continue
        point = fields[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best["mount_point"] or ""):
            best = {
                "mount_point": point,
                "fs_type": tail[0],
                "read_only": "ro" in fields[5].split(","),
            }
    return best


def temp_dir_facts(path: str, hostname: str, stamp: bool) -> dict[str, Any]:
    """Ray's temp dir on this node: file system, free space, writable, other hosts in it.

    With ``stamp`` this host writes its name into it (which is the write test): a
    temp dir in which other hosts' names are found is shared by nodes. The nearest
    existing parent stands in for a temp dir not made yet.
    """
    facts: dict[str, Any] = {"path": path, "exists": os.path.isdir(path), "write_error": None}
    there = path
    while not os.path.isdir(there) and os.path.dirname(there) != there:
        there = os.path.dirname(there)
    facts.update(mount_of(there))
    try:
        st = os.statvfs(there)
        facts["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError as e:
        facts["free_bytes"] = None
        facts["write_error"] = f"{type(e).__name__}: {e}"
    hosts_dir = os.path.join(path, TEMP_HOSTS_DIR)
    if stamp:
        try:
            # rtk's own directory is private (0700), as rtk up makes it: makedirs gives
            # its mode to the last directory only, so each is made in turn.
            for private in (os.path.dirname(hosts_dir), hosts_dir):
                os.makedirs(private, mode=0o700, exist_ok=True)
            with open(os.path.join(hosts_dir, hostname), "w", encoding="utf-8") as f:
                f.write(hostname + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            facts["write_error"] = f"{type(e).__name__}: {e.strerror or e}"
    try:
        others = sorted(n for n in os.listdir(hosts_dir) if n != hostname)
    except OSError:
        others = []
    facts["other_hosts"] = others[:16]
    return facts


def ray_facts() -> dict[str, Any]:
    """Whether this Python has Ray, and its version (read from its metadata: no import)."""
    import importlib.metadata
    import importlib.util
    import sys

    facts: dict[str, Any] = {"executable": sys.executable, "version": None, "error": None}
    try:
        if importlib.util.find_spec("ray") is None:
            facts["error"] = "No module named 'ray'"
            return facts
        facts["version"] = importlib.metadata.version("ray")
    except (ImportError, ValueError, importlib.metadata.PackageNotFoundError) as e:
        facts["error"] = f"{type(e).__name__}: {e}"
    return facts


def listening_sockets() -> dict[str, int]:
    """This node's TCP sockets in LISTEN state (IPv4 and IPv6): socket inode -> port."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == "0A":
                        found[cols[9]] = int(cols[1].rsplit(":", 1)[1], 16)
        except OSError:
            continue
    return found


def port_holders(ports: list[int]) -> dict[int, str]:
    """Of ``ports``, those a process listens on (TCP), each with ``PROGRAM (pid N)``.

    The holder is found through the socket's inode in /proc/PID/fd (all of them as
    root; otherwise this user's), else ``another program``.
    """
    wanted = set(ports)
    inodes = {inode: port for inode, port in listening_sockets().items() if port in wanted}
    held = {port: "another program" for port in inodes.values()}
    if not held:
        return held
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                try:
                    with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                        name = f.read().strip()
                except OSError:
                    name = "a process"
                held[inodes[link[8:-1]]] = f"{name} (pid {pid})"
    return held
