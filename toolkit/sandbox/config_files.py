"""The text files of a sandbox: pure functions of its layout, pinned by tests."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from toolkit.sandbox.names import Layout, NodeLayout
from toolkit.sandbox.node_mounts import HostMount, mount_lines, storage_lines
from toolkit.shell import quote

# Inside a node, the sandbox directory is parked here while /tmp is replaced.
_PARKING = "/run/rtk-sandbox"
SSHD_PID_FILE = "/run/sshd.pid"
SSHD_LOG_FILE = "/run/sshd.log"
READY_MARK = "rtk-sandbox: ready"


def sshd_config(layout: Layout, node: NodeLayout, extra_options: Sequence[str] = ()) -> str:
    """The sshd_config of ``node``: key-only root login on its own address."""
    lines = [
        f"# rtk sandbox {layout.name}: sshd of {node.name}",
        f"HostKey {node.host_key}",
        f"ListenAddress {node.address}",
        "Port 22",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        f"AuthorizedKeysFile {layout.authorized_keys}",
        f"PidFile {SSHD_PID_FILE}",
        "MaxStartups 100:30:200",
        "PrintMotd no",
        "PrintLastLog no",
        "Subsystem sftp internal-sftp",
        *extra_options,
    ]
    return "\n".join(lines) + "\n"


def start_sshd_command(node: NodeLayout, sshd: str) -> str:
    """Shell command that starts ``node``'s sshd, printing its errors to stderr on failure."""
    return (
        f"mkdir -p /run/sshd && {quote(sshd)} -f {quote(str(node.sshd_config))} "
        f"-E {SSHD_LOG_FILE} || {{ cat {SSHD_LOG_FILE} >&2; exit 1; }}"
    )


def init_script(
    layout: Layout,
    node: NodeLayout,
    sshd: str,
    shared: Sequence[Path] = (),
    services: Sequence[str] = (),
    cgroups: Sequence[HostMount] = (),
    container_storage: bool = False,
) -> str:
    """The script PID 1's child runs in ``node``: hostname, private mounts, sshd, wait.

    The node's /tmp, /dev/shm and /run are fresh tmpfs mounts. Host paths under /tmp
    that the node still needs (the sandbox directory, for sshd; ``shared``: a
    virtualenv or source tree there) are put back read-only at their own paths.
    ``services``: lines that start more daemons after sshd (slurmd, with SLURM).
    ``cgroups``: the host's cgroup filesystems, mounted again over the node's fresh
    sysfs; ``container_storage``: the node's own /var/lib/containers (``node_mounts``).
    """
    kept = [layout.directory, *(p for p in shared if not layout.directory.is_relative_to(p))]
    park = [f"{_PARKING}/{i}" for i in range(len(kept))]
    stash = [
        f"mkdir -p {p} && mount --bind {quote(str(k))} {p}" for k, p in zip(kept, park, strict=True)
    ]
    restore = [
        f"mkdir -p {quote(str(k))} && mount --bind {p} {quote(str(k))} && "
        f"mount -o remount,bind,ro {quote(str(k))} && umount {p}"
        for k, p in zip(kept, park, strict=True)
    ]
    return "\n".join(
        [
            f"# rtk sandbox {layout.name}: init of {node.name} in netns {node.netns}",
            "set -eu",
            f"echo {node.name} > /proc/sys/kernel/hostname",
            *mount_lines(cgroups),
            *(storage_lines(node.container_storage) if container_storage else []),
            "mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run",
            *stash,
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
            *restore,
            f"rm -rf {_PARKING}",
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
            f"mount --bind {quote(str(node.hosts_file))} /etc/hosts",
            "# No DNS server is reachable from a node: make lookups fail at once, not time out.",
            "resolv=$(readlink -m /etc/resolv.conf)",
            'case $resolv in /run/*) mkdir -p "${resolv%/*}"; cp '
            f'{quote(str(layout.resolv_conf))} "$resolv";; '
            f'*) if [ -e "$resolv" ]; then mount --bind {quote(str(layout.resolv_conf))} '
            '"$resolv"; fi;; esac',
            start_sshd_command(node, sshd),
            *services,
            f'echo "{READY_MARK}: {node.name} sshd on {node.address}:22"',
            "exec sleep infinity",
            "",
        ]
    )


def hosts_file(layout: Layout, node: NodeLayout) -> str:
    """``node``'s /etc/hosts: localhost and every node of the sandbox."""
    lines = [
        f"# rtk sandbox {layout.name}: /etc/hosts of {node.name}",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        *(f"{n.address}\t{n.name}" for n in layout.nodes),
    ]
    return "\n".join(lines) + "\n"


def resolv_conf(layout: Layout) -> str:
    """Every node's resolv.conf: a server that refuses at once (nodes reach no DNS)."""
    return (
        f"# rtk sandbox {layout.name}: nodes reach nothing outside the sandbox, so DNS\n"
        "# lookups of names not in /etc/hosts should fail at once instead of timing out.\n"
        "nameserver 127.0.0.1\n"
        "options timeout:1 attempts:1\n"
    )


def known_hosts(layout: Layout, host_keys: Mapping[str, str]) -> str:
    """known_hosts: each node's address with its public host key.

    Args:
        layout: The sandbox.
        host_keys: Node name -> public key line (``ssh-ed25519 AAAA... comment``).
    """
    lines = []
    for node in layout.nodes:
        kind, blob = host_keys[node.name].split()[:2]
        lines.append(f"{node.address} {kind} {blob}")
    return "\n".join(lines) + "\n"


def inventory(
    layout: Layout,
    python: str,
    slurm_conf: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The rtk inventory of the sandbox (strings JSON-quoted, which YAML reads as-is).

    ``slurm_conf``: the sandbox's slurm.conf, named in a comment, when it runs SLURM.
    ``env``: every node's ``env:`` (``defaults.env``), for Ray and all it runs.
    """
    slurm = [f"#   its SLURM, from the host: SLURM_CONF={slurm_conf} sinfo"] if slurm_conf else []
    lines = [
        f"# Written by `rtk sandbox up` for sandbox {layout.name}: {len(layout.nodes)} node(s)",
        "# on this machine, each in its own network, PID, mount and UTS namespace,",
        "# reached over real SSH with the key and known_hosts below.",
        f"#   bring Ray up on it:       rtk up {layout.inventory_path}",
        *slurm,
        f"#   remove the whole sandbox: rtk sandbox down --name {layout.name}",
        f"cluster: {layout.name}",
        "transport: ssh",
        "defaults:",
        "  ssh:",
        "    user: root",
        f"    key: {json.dumps(str(layout.key_path))}",
        f"    known_hosts: {json.dumps(str(layout.known_hosts))}",
        f"  python: {json.dumps(python)}",
    ]
    if env:
        lines.append("  env:")
        lines += [f"    {key}: {json.dumps(value)}" for key, value in sorted(env.items())]
    lines.append("nodes:")
    for node in layout.nodes:
        lines.append(f"  - host: {node.name}")
        lines.append(f"    address: {node.address}")
    return "\n".join(lines) + "\n"


def describe_up(layout: Layout, slurm: bool) -> str:
    """What ``rtk sandbox up`` would create (``--dry-run``), in the order it creates it."""
    lines = [
        f"plan: rtk sandbox up, sandbox {layout.name!r}: {len(layout.nodes)} node(s) "
        f"on {layout.subnet}.0/24",
        f"  directory  {layout.directory} (keys, known_hosts, sshd configs, logs, "
        f"{layout.inventory_path.name})",
        f"  bridge     {layout.bridge} holding {layout.gateway}/24",
    ]
    for node in layout.nodes:
        lines.append(
            f"  [{node.name}] {node.address}: netns {node.netns}, veth {node.veth} into "
            f"{layout.bridge}, its own PID, mount and UTS namespaces, sshd on port 22"
        )
    if slurm:
        lines.append(
            f"  SLURM      munged and slurmctld on this host (files in {layout.directory}/munge "
            f"and {layout.directory}/slurm), a slurmd in each node"
        )
    lines.append(f"  inventory  {layout.inventory_path} (printed on stdout once up)")
    return "\n".join(lines) + "\n"
