"""Inside a SLURM allocation: its nodes, and the inventory rtk derives from them.

``--slurm`` turns any inventory into the allocation's cluster, the same way in every
command of a job, so ``rtk up``, ``preflight``, ``train`` and ``down`` agree:

- the nodes are the allocation's (``SLURM_JOB_NODELIST``, expanded by
  ``scontrol show hostnames``), the first one the head; each keeps the settings the
  inventory gives a node of that name, else those of the inventory's first node
  (its container too: pyxis or apptainer run Ray's step in it, see
  ``toolkit.cluster.containers.slurm_step``);
- GPUs per node come from SLURM's variables, else the inventory;
- the transport is srun (no SSH between compute nodes);
- Ray's ports are a block chosen by the job id, so two jobs sharing a node do not
  collide (unless their ids are equal modulo ``PORT_SLOTS``: the probe then finds
  the ports busy and says so);
- the cluster is named ``<cluster>-<job id>`` and Ray's temp dir is
  ``/tmp/rtk-<job id>``: per job, and short (Ray's unix sockets allow 107 bytes).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from toolkit.errors import SlurmError
from toolkit.inventory import Inventory, Node
from toolkit.inventory.hostrange import HostRangeError, expand_hosts
from toolkit.inventory.models import PortSettings

logger = logging.getLogger(__name__)

PORT_BASE = 10000
PORT_BLOCK = 200  # 10 fixed ports, then 190 worker ports
PORT_SLOTS = 100  # blocks from 10000 up to 29999: below the kernel's ephemeral range
FIXED_PORTS = (
    "gcs",
    "dashboard",
    "client_server",
    "node_manager",
    "object_manager",
    "runtime_env_agent",
    "dashboard_agent_grpc",
    "dashboard_agent_listen",
    "metrics_export",
    "rendezvous",
)
SCONTROL_TIMEOUT_S = 30.0

Resolve = Callable[[str], str]


@dataclass(frozen=True)
class Allocation:
    """The SLURM job rtk runs in."""

    job_id: str
    hosts: tuple[str, ...]
    gpus_per_node: int | None


def read_allocation(environ: Mapping[str, str] | None = None) -> Allocation:
    """The allocation this process runs in, from SLURM's environment variables.

    Raises:
        SlurmError: Not inside an allocation, or its node list cannot be read.
    """
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        raise SlurmError(
            "--slurm: not inside a SLURM allocation (no SLURM_JOB_ID / SLURM_JOB_NODELIST); "
            "run it from a batch script (rtk sbatch render|submit) or inside salloc"
        )
    return Allocation(job_id, tuple(expand_nodelist(nodelist)), gpus_per_node(env))


def expand_nodelist(nodelist: str) -> list[str]:
    """Host names of a SLURM node list: ``scontrol show hostnames``, else rtk's own parser.

    Raises:
        SlurmError: Neither can read it.
    """
    scontrol = shutil.which("scontrol")
    if scontrol:
        try:
            done = subprocess.run(
                [scontrol, "show", "hostnames", nodelist],
                capture_output=True,
                text=True,
                timeout=SCONTROL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            # scontrol retries a config it cannot read for a minute; rtk's parser reads
            # every list SLURM writes, so a hung or broken scontrol is no reason to fail.
            logger.warning("scontrol show hostnames failed (%s); expanding %s itself", e, nodelist)
        else:
            if done.returncode == 0 and done.stdout.split():
                return done.stdout.split()
    try:
        return expand_hosts(nodelist)
    except HostRangeError as e:
        raise SlurmError(f"cannot read the node list {nodelist!r}: {e}") from e


def gpus_per_node(env: Mapping[str, str]) -> int | None:
    """GPUs per node that SLURM gave the job, when it says.

    ``SLURM_GPUS_ON_NODE`` (``8``) in a batch script or step; ``SLURM_GPUS_PER_NODE``
    (``8`` or ``a100:8``, as requested) in salloc; else the count of GPU indices.
    """
    for key in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = env.get(key, "").strip()
        match = re.fullmatch(r"(?:[\w.-]+:)?(\d+)", value)
        if match:
            return int(match.group(1))
    gpus = env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS")
    if gpus:
        return len([g for g in gpus.split(",") if g.strip()])
    return None


def job_ports(job_id: str) -> PortSettings:
    """Ray's pinned ports for a job: a block of ``PORT_BLOCK`` chosen by the job id."""
    digits = re.sub(r"\D", "", job_id) or "0"
    base = PORT_BASE + (int(digits) % PORT_SLOTS) * PORT_BLOCK
    fixed = {name: base + i for i, name in enumerate(FIXED_PORTS)}
    return PortSettings(
        **fixed, min_worker=base + len(FIXED_PORTS), max_worker=base + PORT_BLOCK - 1
    )


def resolve_address(host: str) -> str:
    """The host's IPv4 address, preferring one that is not loopback.

    Raises:
        SlurmError: The name does not resolve.
    """
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        raise SlurmError(f"node {host} of the allocation does not resolve: {e}") from e
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return addresses[0]


def slurm_inventory(
    inv: Inventory, allocation: Allocation, resolve: Resolve = resolve_address
) -> Inventory:
    """The inventory of the allocation's cluster (see the module's docstring)."""
    known = {n.name: n for n in inv.nodes}
    template = inv.nodes[0]
    nodes = []
    for host in allocation.hosts:
        base = known.get(host, template)
        gpus = allocation.gpus_per_node if allocation.gpus_per_node is not None else base.gpus
        nodes.append(
            Node(
                name=host,
                address=resolve(host) if host not in known else base.address,
                gpus=gpus,
                cpus=base.cpus,
                resources=base.resources,
                ssh=base.ssh,
                python=base.python,
                ray=base.ray,
                env=base.env,
                container=base.container,
            )
        )
    return dataclasses.replace(
        inv,
        name=f"{inv.name}-{allocation.job_id}",
        transport="srun",
        nodes=tuple(nodes),
        head_name=nodes[0].name,
        min_nodes=len(nodes),
        ports=job_ports(allocation.job_id),
        ray=inv.ray.model_copy(
            update={"temp_dir": f"/tmp/rtk-{allocation.job_id}", "dashboard_host": None}
        ),
        source=f"{inv.source} (SLURM job {allocation.job_id})",
    )
