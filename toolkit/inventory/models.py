"""The inventory file's schema: pydantic models mirroring the YAML, key for key.

These models only check shape and types; ``toolkit.inventory.resolve`` checks what
needs the whole file (duplicate hosts, port clashes, the head) and turns a valid
``InventorySpec`` into the resolved ``Inventory`` the rest of rtk uses.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from toolkit.inventory.yaml_text import EnvText

CLUSTER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def _env_value(value: Any) -> Any:
    """Let ``OMP_NUM_THREADS: 4`` mean the string ``"4"``, and ``true`` mean ``"1"``.

    From a YAML file a number arrives as the text it was written as already
    (``toolkit/inventory/yaml_text.py``, which also says why true is "1"); this
    covers data given as Python values.
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return value


def _size_bytes(value: Any) -> Any:
    """Accept ``20000000000``, ``"20GB"`` or ``"18.5GiB"`` for a size in bytes."""
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
        if match and match.group(2).lower() in _SIZE_UNITS:
            return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
    return value


# Fan-out: defaults and hard limits, from Ray's guidance for large clusters.
#
# - Ray's autoscaler grows a cluster by ``upscaling_speed`` (default 1.0) times the
#   nodes already running: it lets as many new nodes be pending as are up, so Ray
#   itself may have 1,000 nodes joining at once on the way to 2,000 (Ray docs,
#   "Configuring Autoscaling"; the upscaling_speed comment of Ray's cluster YAMLs).
#   MAX_START_WAVE stays below that; the default wave is far smaller.
# - A raylet registers with the GCS, and ``ray start`` then reads its node back; when
#   the GCS is overloaded that read fails and ``ray start`` exits ("GCS cannot find the
#   node", ray-project/ray#47087: the wait was 10 s, later raised). Waves spread the
#   registrations: 64 every 0.5 s is 128 per second, the 1,023 workers of a
#   1,024-node cluster within 8 s, so bring-up stays within about twice its critical
#   path (head start + one worker start + the wait) while the GCS never sees more
#   than one wave arrive at once.
# - Ray's large-cluster best practices ask for ``ulimit -n`` of at least 65535 on the
#   nodes; the machine running rtk holds one SSH connection (a file descriptor, and
#   one paramiko thread) per node it has reached, plus a thread per operation in
#   flight. PARALLEL 256 keeps probes and stops of 1,024 nodes to four rounds of
#   handshakes; MAX_PARALLEL 1024 stays at Linux's usual soft ``ulimit -n`` of 1,024
#   for rtk's own process. Through a jump host every connection is also one to the
#   bastion, whose sshd drops new connections beyond ``MaxStartups`` (OpenSSH default
#   10:30:100): lower ``fanout.parallel`` there, or raise MaxStartups.
PARALLEL = 256
MAX_PARALLEL = 1024
START_WAVE = 64
MAX_START_WAVE = 1024
START_WAVE_INTERVAL_S = 0.5
MAX_START_WAVE_INTERVAL_S = 60.0
# ray.tls when the inventory says nothing: off, until its cost on bring-up is argued
# (docs/security.md); turning it on is one word here.
TLS_DEFAULT = False

EnvValue = Annotated[str, BeforeValidator(_env_value), EnvText()]
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN)]
Port = Annotated[int, Field(ge=1, le=65535)]
SizeBytes = Annotated[int, BeforeValidator(_size_bytes), Field(ge=78_643_200)]
ShmBytes = Annotated[int, BeforeValidator(_size_bytes), Field(ge=1_048_576)]


class _Strict(BaseModel):
    # inf and nan are no timeout, size or amount: refused (a wait of inf s overflows).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class SshSettings(_Strict):
    """How rtk reaches a node over SSH; unset fields inherit from ``defaults.ssh``."""

    user: str | None = Field(None, description="Login user (default: your local user).")
    port: Port | None = Field(None, description="sshd port (default 22).")
    key: str | None = Field(
        None, description="Private key file on this machine, relative to the inventory file."
    )
    jump_host: str | None = Field(
        None, description="Login/bastion host as [user@]host[:port], used as a ProxyJump."
    )
    known_hosts: str | None = Field(
        None,
        description="known_hosts file on this machine checked for host keys, relative to the "
        "inventory file (default ~/.ssh/known_hosts).",
    )
    connect_timeout_s: float | None = Field(None, gt=0, description="Connect timeout (default 10).")

    accept_new_host_keys: bool | None = Field(
        None,
        description="Add unknown host keys to known_hosts (default false: unknown keys refuse).",
    )


class ContainerSettings(_Strict):
    """Run the node's Ray in a container; unset fields inherit from ``defaults.container``.

    rtk runs one long-lived container per node with the host's network, and the
    host's IPC unless ``shm_size`` asks for a /dev/shm of the container's own.
    """

    runtime: Literal["docker", "podman", "apptainer", "pyxis"] | None = Field(
        None,
        description="docker or podman (rtk up over SSH); apptainer or pyxis run only under SLURM.",
    )
    image: str | None = Field(
        None, min_length=1, description="Image on the node (rtk pulls nothing): name[:tag]."
    )
    mounts: list[str] | None = Field(
        None,
        description="Bind mounts SRC:DST or SRC:DST:ro (DST absolute); a node's list "
        "replaces the defaults' list.",
    )
    options: list[str] | None = Field(
        None, description="Extra arguments of docker/podman run, one word per item."
    )
    gpus: Literal["auto", "none", "all"] | None = Field(
        None,
        description="auto (default): the node's GPUs when it has gpus > 0; all; none.",
    )
    shm_size: ShmBytes | None = Field(
        None,
        description="A /dev/shm of this size in its own IPC namespace (e.g. '16GiB'); "
        "default: the host's /dev/shm, through host IPC.",
    )


class NodeSettings(_Strict):
    """Settings a node inherits from ``defaults`` and may override for itself."""

    ssh: SshSettings = Field(default_factory=SshSettings)
    python: str | None = Field(
        None,
        description="Python with Ray on the node (default python3, <venv>/bin/python, or for "
        "transport: local the Python running rtk).",
    )
    venv: str | None = Field(
        None, description="Virtualenv on the node; its bin/python and bin/ray are used."
    )
    ray: str | None = Field(
        None, description="ray executable on the node (default: python -m ray.scripts.scripts)."
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict, description="Extra environment for Ray and everything it runs."
    )
    container: ContainerSettings = Field(
        default_factory=ContainerSettings,
        description="Run Ray in a container (docker, podman) instead of on the host's Python.",
    )


class NodeSpec(NodeSettings):
    """One entry of ``nodes:``; ``host`` may be a range such as ``gpu[01-16]``."""

    host: str = Field(min_length=1, description="Host name or range (gpu[01-16]).")
    address: str | None = Field(
        None,
        description="Address to reach it (default: the host name); a range must match host's.",
    )
    gpus: int = Field(0, ge=0, description="GPUs expected on the node.")
    cpus: int | None = Field(None, ge=1, description="CPUs to give Ray (default: all).")
    resources: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="Extra Ray resources, e.g. {nvlink: 1}."
    )


class NetworkSettings(_Strict):
    """Which NCCL / Gloo environment profile applies, and overrides of its variables."""

    profile: Literal["auto", "ib", "roce", "ethernet"] = Field(
        "auto", description="auto detects InfiniBand/RoCE/Ethernet per node."
    )
    interface: str | None = Field(
        None, description="Socket interface (default: the one on the route to the head)."
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict, description="Overrides of any NCCL_*/GLOO_* variable."
    )


class PortSettings(_Strict):
    """Every port Ray opens, pinned; defaults stay below Linux's ephemeral range."""

    gcs: Port = Field(6379, description="Head: GCS (ray start --port).")
    dashboard: Port = Field(8265, description="Head: dashboard and Jobs API.")
    client_server: Port = Field(10001, description="Head: Ray Client server.")
    node_manager: Port = 6380
    object_manager: Port = 6381
    runtime_env_agent: Port = 6382
    dashboard_agent_grpc: Port = 6383
    dashboard_agent_listen: Port = 6384
    metrics_export: Port = 6385
    rendezvous: Port = Field(29400, description="Head: torchrun's c10d rendezvous (rtk torchrun).")
    min_worker: Port = Field(10002, description="First port of the worker range.")
    max_worker: Port = Field(19999, description="Last port of the worker range.")


class RaySettings(_Strict):
    """Options of ``ray start`` that are the same on every node."""

    temp_dir: str | None = Field(
        None,
        description="Ray's temp dir on every node (default /tmp/rtk-<cluster>); keep it short.",
    )
    object_store_memory: SizeBytes | None = Field(
        None, description="Object store size per node: bytes or '20GB' (default: Ray's choice)."
    )
    dashboard_host: str | None = Field(
        None, description="Address the dashboard binds (default: the head's address)."
    )
    include_dashboard: bool = True
    auth: Literal["token", "none"] = Field(
        "token", description="token: Ray token authentication with a 0600 token file."
    )
    tls: bool = Field(
        TLS_DEFAULT,
        description="true: Ray's gRPC traffic (the token included) in TLS, with a CA per "
        "cluster and a certificate per node that rtk up makes and sends (0600).",
    )
    start_timeout_s: float = Field(120, gt=0, description="Limit for one ray start.")
    wait_timeout_s: float = Field(300, gt=0, description="Limit for all nodes to join.")
    start_wave: int = Field(
        START_WAVE,
        ge=1,
        le=MAX_START_WAVE,
        description="Worker ray starts begun together; the next wave begins "
        "start_wave_interval_s later, without waiting for this one to finish.",
    )
    start_wave_interval_s: float = Field(
        START_WAVE_INTERVAL_S,
        gt=0,
        le=MAX_START_WAVE_INTERVAL_S,
        description="Seconds between the beginnings of two waves of worker ray starts.",
    )


class FanoutSettings(_Strict):
    """How many per-node operations rtk keeps in flight at once.

    ``parallel`` bounds the cheap operations (probe, file puts, stop, ``rtk exec``,
    preflight's facts): each in flight holds one thread here and one SSH session; no
    thread is held for a node that waits. Worker ``ray start`` is paced separately by
    ``ray.start_wave`` and ``ray.start_wave_interval_s``.
    """

    parallel: int = Field(
        PARALLEL,
        ge=1,
        le=MAX_PARALLEL,
        description="Most per-node operations (probe, put, stop, exec) in flight at once.",
    )


class SlurmSettings(_Strict):
    """Defaults for ``rtk sbatch`` and ``rtk up --slurm``."""

    partition: str | None = None
    account: str | None = None
    time: str | None = Field(
        None,
        pattern=r"^([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}$",
        description="Time limit as minutes, HH:MM:SS or D-HH:MM:SS.",
    )
    nodes: int | None = Field(None, ge=1)
    gpus_per_node: int | None = Field(None, ge=0)
    job_name: str | None = None


class InventorySpec(_Strict):
    """The whole inventory file."""

    cluster: str = Field(pattern=CLUSTER_NAME_PATTERN, description="Cluster name: a-z 0-9 _ -.")
    transport: Literal["ssh", "local"] = Field(
        "ssh", description="ssh: nodes over SSH; local: this machine, one node."
    )
    head: str | None = Field(None, description="Host of the head node (default: the first node).")
    min_nodes: int | None = Field(
        None, ge=1, description="Accept a partial cluster of this many nodes (default: all)."
    )
    defaults: NodeSettings = Field(default_factory=NodeSettings)
    nodes: list[NodeSpec] = Field(min_length=1)
    network: NetworkSettings = Field(default_factory=NetworkSettings)
    ports: PortSettings = Field(default_factory=PortSettings)
    ray: RaySettings = Field(default_factory=RaySettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    fanout: FanoutSettings = Field(default_factory=FanoutSettings)
