"""Creating a sandbox: keys and configs, the network, each node's init, real SSH logins."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import toolkit
from toolkit.errors import SandboxError
from toolkit.sandbox import config_files, network, procs
from toolkit.sandbox.hostcheck import check_host
from toolkit.sandbox.names import Layout, NodeLayout, netns_pattern
from toolkit.sandbox.node_mounts import read_cgroup_mounts
from toolkit.sandbox.sandbox import Sandbox
from toolkit.sandbox.sandbox_json import NodeRecord, SandboxRecord
from toolkit.sandbox.slurm import daemons as slurm_daemons
from toolkit.sandbox.slurm.conf import SlurmLayout, node_init_lines
from toolkit.sandbox.ssh_login import keygen, wait_for_login
from toolkit.sandbox.status import list_sandboxes
from toolkit.sandbox.teardown import destroy

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]
# Each node replaces these with its own, so a Python under them is invisible there.
_NODE_PRIVATE = ("/tmp/", "/run/", "/dev/shm/")


def _refuse_existing(layout: Layout) -> None:
    hint = f"remove it with `rtk sandbox down --name {layout.name}`"
    if layout.directory.exists():
        raise SandboxError(
            f"sandbox {layout.name} already exists ({layout.directory}); {hint} first"
        )
    leftovers = [ns for ns in network.list_netns() if netns_pattern(layout.name).match(ns)]
    if layout.bridge in network.list_links():
        leftovers.append(layout.bridge)
    if leftovers:
        raise SandboxError(
            f"leftovers of a sandbox {layout.name} exist ({', '.join(leftovers)}); {hint} first"
        )
    users = network.subnet_users(layout.subnet)
    if users:
        raise SandboxError(
            f"subnet {layout.subnet}.0/24 is already in use here ({'; '.join(users)}); "
            "choose another with --subnet, e.g. 10.77.9"
        )


def _check_python(python: str) -> list[Path]:
    """Check ``python`` and return the host paths under /tmp that nodes must still see.

    Each node mounts its own /tmp, so a virtualenv there (CI clones often live in
    /tmp), and the source tree of an editable install of rtk, are bound back into
    every node read-only at the same path.
    """
    path = Path(python)
    if not path.is_absolute() or not path.exists():
        raise SandboxError(f"python {python!r} is not an existing absolute path")
    for candidate in (str(path), str(path.resolve())):
        if candidate.startswith(_NODE_PRIVATE[1:]):
            raise SandboxError(
                f"python {python} lives under {', '.join(_NODE_PRIVATE[1:])}, which every node "
                "replaces with its own; use a Python installed elsewhere"
            )
    wanted = [
        path.parent.parent,
        path.resolve().parent.parent,
        Path(toolkit.__file__).resolve().parents[1],
    ]
    kept: list[Path] = []
    for root in sorted({p for p in wanted if str(p).startswith("/tmp/")}):
        if not any(root.is_relative_to(k) for k in kept):
            kept.append(root)
    return kept


def _claim_directory(layout: Layout) -> None:
    try:
        layout.directory.mkdir(mode=0o700)
    except FileExistsError as e:
        raise SandboxError(
            f"sandbox {layout.name} already exists ({layout.directory}); remove it with "
            f"`rtk sandbox down --name {layout.name}` first"
        ) from e
    except OSError as e:
        raise SandboxError(f"cannot create {layout.directory}: {e}") from e


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _write_files(
    layout: Layout,
    record: SandboxRecord,
    sshd_options: Sequence[str],
    shared: Sequence[Path],
    slurm_tools: dict[str, str],
) -> None:
    client_pub = keygen(layout.key_path, f"rtk-sandbox-{layout.name}")
    _write(layout.authorized_keys, client_pub + "\n", 0o600)
    host_keys = {n.name: keygen(n.host_key, f"{n.name}.{layout.name}") for n in layout.nodes}
    _write(layout.known_hosts, config_files.known_hosts(layout, host_keys))
    _write(layout.resolv_conf, config_files.resolv_conf(layout))
    if record.slurm:
        controller = socket.gethostname().split(".")[0]
        slurm_daemons.write_files(layout, controller, os.cpu_count() or 1)
    cgroups = read_cgroup_mounts()
    # A node's own container storage only where podman could use it (no empty
    # /var/lib/containers made on a host without it).
    storage = shutil.which("podman") is not None
    for node in layout.nodes:
        _write(node.sshd_config, config_files.sshd_config(layout, node, sshd_options))
        services = node_init_lines(layout, node, slurm_tools["slurmd"]) if record.slurm else []
        if storage:
            node.container_storage.mkdir(mode=0o700, exist_ok=True)
        script = config_files.init_script(
            layout, node, record.sshd, shared, services, cgroups, container_storage=storage
        )
        _write(node.init_script, script, 0o700)
        _write(node.hosts_file, config_files.hosts_file(layout, node))


def _disable_bridge_netfilter(record: SandboxRecord) -> None:
    path = network.BRIDGE_NF_CALL_IPTABLES
    current = network.read_sysctl(path)
    if current is None:
        return
    # Another sandbox may already have changed it: inherit the value to restore.
    original = current
    for other in list_sandboxes():
        if other != record.name:
            try:
                other_record = SandboxRecord.load(Path(f"/tmp/rtk-sb-{other}/sandbox.json"))
            except SandboxError:
                continue
            original = other_record.sysctl.get(str(path), original)
    if original != "0":
        record.sysctl[str(path)] = original
    if current != "0":
        network.write_sysctl(path, "0")


def _start_network(layout: Layout, record: SandboxRecord) -> None:
    _disable_bridge_netfilter(record)
    record.save(layout.record_path)
    network.create_bridge(layout)
    record.bridge = layout.bridge
    record.save(layout.record_path)
    for node, node_record in zip(layout.nodes, record.nodes, strict=True):
        network.create_netns(node)
        node_record.netns = node.netns
        record.save(layout.record_path)
        network.connect_node(layout, node)
        node_record.veth = node.veth
        record.save(layout.record_path)


def _start_slurm_daemons(
    layout: Layout, record: SandboxRecord, slurm_tools: dict[str, str], say: Progress
) -> None:
    paths = SlurmLayout.of(layout)
    record.munged_pid = slurm_daemons.start_munged(paths, slurm_tools["munged"])
    record.save(layout.record_path)
    record.slurmctld_pid = slurm_daemons.start_slurmctld(
        paths, slurm_tools["slurmctld"], layout.gateway
    )
    record.save(layout.record_path)
    say(
        f"munged PID {record.munged_pid}, slurmctld PID {record.slurmctld_pid} on "
        f"{layout.gateway}:{paths.slurmctld_port}"
    )


def _start_nodes(
    layout: Layout, record: SandboxRecord, tools: dict[str, str], say: Progress
) -> None:
    for node, node_record in zip(layout.nodes, record.nodes, strict=True):
        node_record.starter_pid = procs.start_node(node, tools)
        record.save(layout.record_path)
        node_record.init_pid = procs.find_init(node, node_record.starter_pid)
        record.save(layout.record_path)
        say(f"{node.name}: init started, host PID {node_record.init_pid}")


def _wait_for_logins(
    layout: Layout, record: SandboxRecord, timeout_s: float, say: Progress
) -> None:
    def one(node: NodeLayout, init_pid: int) -> None:
        def dead() -> str | None:
            if procs.is_node_init(init_pid, node.netns):
                return None
            return f"its init ended; {procs.log_tail(node)}"

        waited_s = wait_for_login(
            node.name, node.address, layout.key_path, layout.known_hosts, timeout_s, dead
        )
        say(f"{node.name}: ssh root@{node.address} works (after {waited_s:.1f} s)")

    pids = [n.init_pid for n in record.nodes if n.init_pid is not None]
    with ThreadPoolExecutor(max_workers=min(8, len(pids))) as pool:
        for future in [pool.submit(one, n, p) for n, p in zip(layout.nodes, pids, strict=True)]:
            future.result()


def _check_node_to_node(layout: Layout, record: SandboxRecord) -> None:
    first, others = record.nodes[0], layout.nodes[1:]
    if not others or first.init_pid is None:
        return
    script = " && ".join(
        f"timeout 3 bash -c 'exec 3<>/dev/tcp/{n.address}/22' || {{ echo {n.name}; exit 1; }}"
        for n in others
    )
    done = procs.run_in(first.init_pid, ["bash", "-c", script], timeout_s=30)
    if done.returncode != 0:
        raise SandboxError(
            f"{first.name} cannot open TCP to {done.stdout.strip() or 'another node'}'s sshd "
            f"across bridge {layout.bridge}: the host drops bridged traffic (check its "
            "firewall's FORWARD rules)"
        )


def create(
    nodes: int,
    name: str = "sandbox",
    subnet: str = "10.77.0",
    *,
    python: str | None = None,
    sshd_options: Sequence[str] = (),
    slurm: bool = False,
    ready_timeout_s: float = 30.0,
    progress: Progress | None = None,
    ray_env: Mapping[str, str] | None = None,
) -> Sandbox:
    """Create a sandbox of ``nodes`` nodes on this machine and wait until SSH works.

    Each node has its own network, PID, mount and UTS namespace (so its own address,
    host name, process table, /tmp, /dev/shm and /run) and runs a real sshd. On any
    failure, everything created so far is removed before the error propagates.

    Args:
        nodes: How many nodes (1-64); node i is ``node<i>`` at ``<subnet>.<10+i>``.
        name: Sandbox name (1-8 characters a-z 0-9 _ -); also the inventory's cluster name.
        subnet: First three octets of a private /24 unused on this machine.
        python: The Python the inventory names (default: the one running this).
        sshd_options: Extra sshd_config lines for every node.
        slurm: Also run SLURM: munged and slurmctld on this host, slurmd in each node,
            one default partition of all nodes (see ``toolkit.sandbox.slurm``); client
            commands need ``Sandbox.slurm_env()``. Needs Debian's slurm-wlm and munge.
        ready_timeout_s: How long each node may take to accept an SSH login (and, with
            SLURM, to be idle in ``sinfo``).
        progress: Called with one line per step done.
        ray_env: Environment for Ray on every node, written into the inventory
            (``defaults.env``): the tests turn Ray's health-check clocks down with it.

    Returns:
        The running sandbox.

    Raises:
        SandboxError: The inputs or this machine do not allow it, or a step failed.
    """
    say: Progress = progress or (lambda line: None)
    began = time.monotonic()
    layout = Layout.build(name, subnet, nodes)
    tools = check_host()
    python = python or sys.executable
    shared = _check_python(python)
    slurm_tools = slurm_daemons.find_slurm_tools() if slurm else {}
    _refuse_existing(layout)
    if slurm:
        slurm_daemons.check_port_free(SlurmLayout.of(layout).slurmctld_port)
    _claim_directory(layout)
    try:
        record = SandboxRecord(
            name=layout.name,
            subnet=layout.subnet,
            directory=str(layout.directory),
            sshd=tools["sshd"],
            python=python,
            created_at=time.time(),
            nodes=[NodeRecord(n.name, n.address) for n in layout.nodes],
            slurm=slurm,
        )
        record.save(layout.record_path)
        _write_files(layout, record, sshd_options, shared, slurm_tools)
        say(f"keys and configs in {layout.directory}")
        _start_network(layout, record)
        say(f"bridge {layout.bridge} {layout.gateway}/24, {nodes} netns with veth pairs")
        if slurm:
            _start_slurm_daemons(layout, record, slurm_tools, say)
        _start_nodes(layout, record, tools, say)
        _wait_for_logins(layout, record, ready_timeout_s, say)
        _check_node_to_node(layout, record)
        say("node-to-node TCP works")
        slurm_conf = None
        if slurm:
            waited_s = slurm_daemons.wait_for_nodes(
                layout, record, slurm_tools["sinfo"], ready_timeout_s
            )
            slurm_conf = SlurmLayout.of(layout).conf
            say(f"SLURM: all {nodes} nodes idle in sinfo (after {waited_s:.1f} s more)")
        text = config_files.inventory(layout, python, slurm_conf, ray_env)
        _write(layout.inventory_path, text)
        sandbox = Sandbox(layout, record)
    except BaseException as e:
        logger.info("creating sandbox %s failed (%s); removing what was created", name, e)
        try:
            destroy(layout.name)
        except Exception as cleanup_error:  # noqa: BLE001 - report, keep the first error
            logger.error("cleanup of sandbox %s failed too: %s", name, cleanup_error)
        raise
    logger.info("sandbox %s: %s nodes up in %.1f s", name, nodes, time.monotonic() - began)
    return sandbox
