"""Removing a sandbox: from its record, and by name when the record is missing or partial."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from toolkit.errors import SandboxError
from toolkit.sandbox import cpu_share, network, procs
from toolkit.sandbox.hostcheck import check_host
from toolkit.sandbox.names import (
    RECORD_FILE,
    bridge_name,
    netns_pattern,
    sandbox_dir,
    validate_name,
    veth_pattern,
)
from toolkit.sandbox.sandbox_json import SandboxRecord
from toolkit.sandbox.slurm import daemons as slurm_daemons
from toolkit.sandbox.status import list_sandboxes

logger = logging.getLogger(__name__)


def _read_record(path: Path) -> SandboxRecord | None:
    if not path.exists():
        return None
    try:
        return SandboxRecord.load(path)
    except SandboxError as e:
        logger.warning("%s; removing sandbox by its names instead", e)
        return None


def destroy(name: str) -> list[str]:
    """Remove sandbox ``name``: its processes, SLURM daemons, veths, netns, bridge and dir.

    Works from the record in the sandbox directory and, for whatever the record lacks,
    from the names every sandbox object carries (``rtk-<name>-<i>``, ``rtv-<name>-<i>``,
    ``rtkb-<name>``). Idempotent: a second call finds nothing and returns ``[]``.

    Returns:
        One line per thing removed.

    Raises:
        SandboxError: Not allowed here (see ``check_host``), or something could not be
            removed (everything else is still removed first).
    """
    validate_name(name)
    check_host()
    directory = sandbox_dir(name)
    record = _read_record(directory / RECORD_FILE)
    removed: list[str] = []
    failures: list[str] = []

    netns = [n.netns for n in record.nodes if n.netns] if record else []
    netns += [ns for ns in network.list_netns() if netns_pattern(name).match(ns)]
    netns = list(dict.fromkeys(netns))

    # Killing a node's init ends its whole PID namespace; its starter (unshare) then
    # exits, and anything else still in the netns is a leftover.
    nodes = record.nodes if record else []
    inits = {
        n.name: n.init_pid
        for n in nodes
        if n.init_pid and n.netns and procs.is_node_init(n.init_pid, n.netns)
    }
    survivors = procs.kill_and_wait(inits.values())
    removed += [f"{node} (init PID {pid})" for node, pid in inits.items() if pid not in survivors]
    starters = [n.starter_pid for n in nodes if n.starter_pid]
    procs.wait_gone(starters, timeout_s=2.0)
    for ns in netns:
        leftover = network.netns_pids(ns)
        survivors += procs.kill_and_wait(leftover)
        if leftover:
            removed.append(f"{len(leftover)} leftover process(es) in netns {ns}")
    if survivors:
        failures.append(f"processes still alive after SIGKILL: {survivors}")
    procs.reap_starters(starters)
    # SLURM's host daemons, after the slurmds (which went with their nodes).
    try:
        removed += slurm_daemons.stop(directory, record)
    except SandboxError as e:
        failures.append(str(e))

    links = network.list_links()
    veths = [n.veth for n in record.nodes if n.veth] if record else []
    veths += [link for link in links if veth_pattern(name).match(link)]
    for link in [*dict.fromkeys(veths), bridge_name(name)]:
        try:
            if network.delete_link(link):
                removed.append(f"interface {link}")
        except SandboxError as e:
            failures.append(str(e))
    for ns in netns:
        try:
            if network.delete_netns(ns):
                removed.append(f"netns {ns}")
        except SandboxError as e:
            failures.append(str(e))
        if cpu_share.remove(ns):
            removed.append(f"cpu cgroup {ns}")

    if record and record.sysctl:
        others = [other for other in list_sandboxes() if other != name]
        for path, value in record.sysctl.items():
            if others:
                logger.info("leaving %s for sandbox(es) %s", path, ", ".join(others))
                continue
            try:
                network.write_sysctl(Path(path), value)
                removed.append(f"sysctl {path} back to {value}")
            except SandboxError as e:
                failures.append(str(e))

    if directory.exists():
        try:
            shutil.rmtree(directory)
            removed.append(f"directory {directory}")
        except OSError as e:
            failures.append(f"cannot remove {directory}: {e}")

    for line in removed:
        logger.info("sandbox %s: removed %s", name, line)
    if failures:
        raise SandboxError(f"sandbox {name}: cleanup incomplete: {'; '.join(failures)}")
    return removed
