"""A CPU share per sandbox node: each node's processes in their own cpu cgroup.

Real nodes have their own CPUs; sandbox nodes share the host's. Without a group per
node, the kernel shares CPU time per thread, so a busy process inside one node slows
every node alike and no per-node test can tell which node is starved. In a cgroup
each (equal weight), the scheduler first divides the CPU between the nodes, then
inside a node between its processes: a busy process in node2 takes node2's share,
not its peers'.

The node's starter joins its group before it ``exec``s, so the node's init, sshd and
everything started over SSH (Ray, the trainer) inherit it. ``nsenter`` into a node
(``Sandbox.run_in``) does not move a process: a test that wants a process to count
against a node starts it over SSH, or writes its PID to ``group_path(...)/cgroup.procs``.

Where no writable cpu controller exists (cgroup v1's ``cpu`` hierarchy, or v2 with
``cpu`` enabled), nodes run without it, as before; ``available`` says which.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from toolkit.sandbox.names import NodeLayout

V1_CPU = Path("/sys/fs/cgroup/cpu")
V2_ROOT = Path("/sys/fs/cgroup")
PARENT = "rtk-sandbox"


def cpu_root() -> Path | None:
    """The cpu controller's hierarchy this host lets rtk write, or None."""
    if (V1_CPU / "cpu.shares").exists() or (V1_CPU / "tasks").exists():
        root = V1_CPU
    elif "cpu" in _read(V2_ROOT / "cgroup.controllers").split():
        root = V2_ROOT
    else:
        return None
    try:
        (root / PARENT).mkdir(exist_ok=True)
    except OSError:
        return None
    if root == V2_ROOT:
        _enable_cpu(V2_ROOT)
        _enable_cpu(V2_ROOT / PARENT)
    return root


def available() -> bool:
    """True when nodes get a CPU share of their own here."""
    return cpu_root() is not None


def group_path(node: NodeLayout) -> Path | None:
    """The node's cgroup directory (made if missing), or None without a cpu controller."""
    root = cpu_root()
    if root is None:
        return None
    path = root / PARENT / node.netns
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    return path


def wrap(argv: list[str], node: NodeLayout) -> list[str]:
    """``argv`` run by a shell that first moves itself into the node's group."""
    path = group_path(node)
    if path is None:
        return argv
    join = 'echo $$ > "$1" && shift && exec "$@"'
    return ["sh", "-c", join, "sh", str(path / "cgroup.procs"), *argv]


def remove(netns: str) -> bool:
    """Remove the group of the node whose netns is ``netns`` (its processes gone)."""
    root = cpu_root()
    if root is None:
        return False
    path = root / PARENT / netns
    if not path.is_dir():
        return False
    with contextlib.suppress(OSError):
        path.rmdir()
        return True
    return False


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except OSError:
        return ""


def _enable_cpu(path: Path) -> None:
    with contextlib.suppress(OSError):
        (path / "cgroup.subtree_control").write_text("+cpu", encoding="ascii")
