"""Where a sandbox's SLURM files live, its ports and its config text (pure)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from toolkit.sandbox.names import Layout, NodeLayout
from toolkit.shell import quote

# slurmctld/slurmd ports: 20000 + 2 * (the subnet's /24 number mod 5000), above Ray's
# default worker ports (10002-19999) and below Linux's ephemeral range (32768-).
PORT_BASE = 20000
PORT_SLOTS = 5000
# Inside each node (its own /run): slurmd's spool, PID file and log.
NODE_SLURMD_DIR = "/run/slurmd"
# Where nodes see the sandbox's slurm.conf and cgroup.conf.
NODE_SLURM_ETC = "/etc/slurm"
# Completed jobs stay visible to `scontrol show job` this long (there is no accounting).
MIN_JOB_AGE_S = 600
# Between SIGTERM and SIGKILL of a cancelled job's processes.
KILL_WAIT_S = 10
# slurm.conf AuthInfo cred_expire: also the delay before a requeued job may run again.
CRED_EXPIRE_S = 20


def ports(subnet: str) -> tuple[int, int]:
    """The (slurmctld, slurmd) TCP ports of a sandbox on ``<subnet>.0/24``."""
    number = int(ipaddress.IPv4Address(f"{subnet}.0")) >> 8
    port = PORT_BASE + 2 * (number % PORT_SLOTS)
    return port, port + 1


@dataclass(frozen=True)
class SlurmLayout:
    """Every path and port of a sandbox's SLURM, derived from its layout."""

    munge_dir: Path
    munge_key: Path
    munge_socket: Path
    munged_pid_file: Path
    munged_log: Path
    munged_seed: Path
    directory: Path
    etc: Path
    conf: Path
    cgroup_conf: Path
    state: Path
    slurmctld_pid_file: Path
    slurmctld_log: Path
    slurmctld_port: int
    slurmd_port: int

    @classmethod
    def of(cls, layout: Layout) -> SlurmLayout:
        """The SLURM paths and ports of sandbox ``layout``."""
        munge, slurm = layout.directory / "munge", layout.directory / "slurm"
        slurmctld_port, slurmd_port = ports(layout.subnet)
        return cls(
            munge_dir=munge,
            munge_key=munge / "munge.key",
            munge_socket=munge / "munge.socket",
            munged_pid_file=munge / "munged.pid",
            munged_log=munge / "munged.log",
            munged_seed=munge / "munged.seed",
            directory=slurm,
            etc=slurm / "etc",
            conf=slurm / "etc" / "slurm.conf",
            cgroup_conf=slurm / "etc" / "cgroup.conf",
            state=slurm / "state",
            slurmctld_pid_file=slurm / "slurmctld.pid",
            slurmctld_log=slurm / "slurmctld.log",
            slurmctld_port=slurmctld_port,
            slurmd_port=slurmd_port,
        )


def slurmd_log(node_name: str) -> str:
    """Path, inside its node, of that node's slurmd log."""
    return f"{NODE_SLURMD_DIR}/slurmd-{node_name}.log"


def slurm_conf(layout: Layout, controller_host: str, cpus: int) -> str:
    """The sandbox's slurm.conf: host controller, one default partition of every node.

    Args:
        layout: The sandbox.
        controller_host: This machine's short host name (slurmctld checks it).
        cpus: CPUs of each node (all nodes share this machine's CPUs).
    """
    paths = SlurmLayout.of(layout)
    names = ",".join(n.name for n in layout.nodes)
    lines = [
        f"# rtk sandbox {layout.name}: SLURM with slurmctld on this host at {layout.gateway}",
        f"ClusterName=rtk-{layout.name}",
        f"SlurmctldHost={controller_host}({layout.gateway})",
        f"SlurmctldPort={paths.slurmctld_port}",
        f"SlurmdPort={paths.slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "# cred_expire: a step credential's lifetime, and how long a requeued job waits",
        f"# before it may start again (120 s by default): {CRED_EXPIRE_S} s for quick requeues.",
        f"AuthInfo=socket={paths.munge_socket},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={paths.state}",
        f"SlurmctldPidFile={paths.slurmctld_pid_file}",
        f"# slurmctld runs in the foreground; its stderr goes to {paths.slurmctld_log}.",
        "# Each node has its own /run: slurmd's spool, PID file and log stay in the node.",
        f"SlurmdSpoolDir={NODE_SLURMD_DIR}/%n",
        f"SlurmdPidFile={NODE_SLURMD_DIR}/slurmd-%n.pid",
        f"SlurmdLogFile={NODE_SLURMD_DIR}/slurmd-%n.log",
        "# Nodes share this machine's CPUs: trust this file, not what slurmd detects.",
        "SlurmdParameters=config_overrides",
        "# No cgroups per job in namespaces: track processes by parentage.",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "# No slurmdbd: sacct does not work; job states come from `scontrol show job`.",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "# Jobs send no mail (slurmctld logs an error when there is no mail program).",
        "MailProg=/bin/true",
        "ReturnToService=2",
        f"MinJobAge={MIN_JOB_AGE_S}",
        f"KillWait={KILL_WAIT_S}",
        *(
            f"NodeName={n.name} NodeAddr={n.address} CPUs={cpus} State=UNKNOWN"
            for n in layout.nodes
        ),
        f"PartitionName=rtk Nodes={names} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def cgroup_conf(layout: Layout) -> str:
    """The sandbox's cgroup.conf (slurmd loads the cgroup plugin even with task/none)."""
    return (
        f"# rtk sandbox {layout.name}: slurmd's cgroup plugin; cgroup/v1 because autodetection\n"
        "# fails on a /sys/fs/cgroup that is a tmpfs of v1 hierarchies.\n"
        "CgroupPlugin=cgroup/v1\n"
    )


def node_init_lines(layout: Layout, node: NodeLayout, slurmd: str) -> list[str]:
    """Lines of ``node``'s init that start its slurmd (after its sshd).

    Args:
        layout: The sandbox.
        node: The node.
        slurmd: The slurmd binary.
    """
    paths = SlurmLayout.of(layout)
    log = slurmd_log(node.name)
    return [
        f"# SLURM: the sandbox's config as {NODE_SLURM_ETC}; slurmd's files in {NODE_SLURMD_DIR}.",
        f"if [ -d {NODE_SLURM_ETC} ]; then mount --bind {quote(str(paths.etc))} "
        f"{NODE_SLURM_ETC}; fi",
        f"mkdir -p {NODE_SLURMD_DIR}/{node.name}",
        f"{quote(slurmd)} -f {quote(str(paths.conf))} -N {node.name} || "
        f"{{ tail -n 5 {log} >&2 || true; exit 1; }}",
    ]
