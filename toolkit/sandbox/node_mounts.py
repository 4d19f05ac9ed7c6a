"""What a node needs mounted to run containers as a real machine does (pure but ``read_``).

A node's mount namespace starts as a copy of the host's with a fresh sysfs (that of
its network namespace), so the host's cgroup filesystems under /sys/fs/cgroup are gone
there and runc or crun refuse to start a container. The node mounts them again, the
same types with the same options (cgroup filesystems are the host's own hierarchies,
not copies).

Each node also gets a container storage of its own at ``/var/lib/containers``, as each
real machine has: nodes share the host's files, and podman's state there is not
meant to be shared by podmans with different /run: the first podman call of a node
whose /run is new "refreshes" every container in the store, so that another node's
running container reads ``Created``, cannot be entered, and ``podman stop`` leaves
its processes running.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.shell import quote

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_TYPES = ("tmpfs", "cgroup", "cgroup2")
CONTAINER_STORAGE = "/var/lib/containers"
MOUNTS_FILE = Path("/proc/self/mounts")


@dataclass(frozen=True)
class HostMount:
    """One line of /proc/self/mounts: what is mounted where, of which type, how."""

    source: str
    target: str
    fstype: str
    options: str


def cgroup_mounts(mounts_text: str) -> tuple[HostMount, ...]:
    """The host's cgroup filesystems (and the tmpfs holding cgroup v1's), in mount order.

    Args:
        mounts_text: /proc/self/mounts of the host.
    """
    found = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        source, target, fstype, options = fields[:4]
        inside = target == CGROUP_ROOT or target.startswith(CGROUP_ROOT + "/")
        if inside and fstype in CGROUP_TYPES:
            found.append(HostMount(source, target, fstype, options))
    return tuple(found)


def read_cgroup_mounts(path: Path = MOUNTS_FILE) -> tuple[HostMount, ...]:
    """``cgroup_mounts`` of this host; none when its mount table cannot be read."""
    try:
        return cgroup_mounts(path.read_text(encoding="utf-8"))
    except OSError:
        return ()


def mount_lines(mounts: Sequence[HostMount]) -> list[str]:
    """Shell lines that mount ``mounts`` again inside a node, each target made first.

    A tmpfs that holds cgroup v1's hierarchies is mounted read-write (systemd mounts
    it read-only once it made its directories; here they are made after it).
    """
    lines = []
    for m in mounts:
        options = m.options
        if m.fstype == "tmpfs":
            options = ",".join(o for o in options.split(",") if o not in ("ro", "rw")) or "rw"
        target = quote(m.target)
        lines.append(
            f"mkdir -p {target} && mount -t {quote(m.fstype)} -o {quote(options)} "
            f"{quote(m.source)} {target}"
        )
    return lines


def storage_lines(storage: Path) -> list[str]:
    """Shell lines that give a node ``storage`` (a host directory) as its container storage."""
    target = CONTAINER_STORAGE
    return [f"mkdir -p {target} && mount --bind {quote(str(storage))} {target}"]
