"""A sandbox node's mounts for containers: the host's cgroup filesystems, its own storage."""

from __future__ import annotations

import subprocess
from pathlib import Path

from toolkit.sandbox.node_mounts import HostMount, cgroup_mounts, mount_lines, storage_lines

HYBRID = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,nosuid,nodev,noexec,relatime,xattr,name=systemd 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
bpf /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0
/dev/vda / ext4 rw,relatime 0 0
"""
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def test_only_the_cgroup_filesystems_in_mount_order() -> None:
    assert [(m.target, m.fstype) for m in cgroup_mounts(HYBRID)] == [
        ("/sys/fs/cgroup", "tmpfs"),
        ("/sys/fs/cgroup/unified", "cgroup2"),
        ("/sys/fs/cgroup/systemd", "cgroup"),
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup"),
    ]
    assert cgroup_mounts(UNIFIED) == (
        HostMount(
            "cgroup2", "/sys/fs/cgroup", "cgroup2", "rw,nosuid,nodev,noexec,relatime,nsdelegate"
        ),
    )
    assert cgroup_mounts("") == ()


def test_lines_make_each_target_and_mount_the_tmpfs_writable() -> None:
    lines = mount_lines(cgroup_mounts(HYBRID))
    assert lines[0] == (
        "mkdir -p /sys/fs/cgroup && mount -t tmpfs -o nosuid,nodev,noexec,mode=755 tmpfs "
        "/sys/fs/cgroup"
    )
    assert lines[3] == (
        "mkdir -p /sys/fs/cgroup/cpu,cpuacct && mount -t cgroup -o "
        "rw,nosuid,nodev,noexec,relatime,cpu,cpuacct cgroup /sys/fs/cgroup/cpu,cpuacct"
    )
    for line in lines:  # each is one valid shell command
        assert subprocess.run(["sh", "-n", "-c", line], check=False).returncode == 0


def test_storage_is_a_bind_mount_over_var_lib_containers() -> None:
    assert storage_lines(Path("/tmp/rtk-sb-x/containers1")) == [
        "mkdir -p /var/lib/containers && mount --bind /tmp/rtk-sb-x/containers1 /var/lib/containers"
    ]
