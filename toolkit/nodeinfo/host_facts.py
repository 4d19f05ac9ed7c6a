"""What ``facts.py`` reports about a node for preflight, as typed records (read on the host).

``facts.py`` prints one JSON object; ``NodeFacts.from_json`` reads it once, where the
answer arrives (``toolkit.preflight.runner``), and rejects a malformed one with an
error that names the node and the field. Preflight's checks take these records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.nodeinfo.gpu_facts import GpuFacts
from toolkit.nodeinfo.history_facts import DcgmFacts, KernelLogFacts

WHAT = "preflight facts"


@dataclass(frozen=True)
class HostFacts:
    """Shared memory, limits, name resolution, free disk and ephemeral ports.

    Attributes:
        hostname: The node's host name.
        hostname_addresses: What the host name resolves to there (or why not).
        dev_shm_bytes: The size of /dev/shm (None: there is none).
        memlock_bytes: The locked-memory limit (None: unlimited).
        nofile: The open-files limit (None: unlimited).
        disk_path: Where free space was measured (the run directory or its parent).
        disk_free_bytes: Free space there.
        ephemeral_ports: The kernel's ephemeral port range, low and high (None: unknown).
    """

    hostname: str
    hostname_addresses: tuple[str, ...] = ()
    dev_shm_bytes: int | None = None
    memlock_bytes: int | None = None
    nofile: int | None = None
    disk_path: str | None = None
    disk_free_bytes: int | None = None
    ephemeral_ports: tuple[int, int] | None = None

    @classmethod
    def read(cls, f: Fields) -> HostFacts:
        """Read the host fields of a facts answer."""
        span = f.integers("ephemeral_ports")
        if span and len(span) != 2:
            raise f.fail("ephemeral_ports", "[low, high]")
        return cls(
            hostname=f.text("hostname"),
            hostname_addresses=f.texts("hostname_addresses"),
            dev_shm_bytes=f.integer_or_none("dev_shm_bytes"),
            memlock_bytes=f.integer_or_none("memlock_bytes"),
            nofile=f.integer_or_none("nofile"),
            disk_path=f.text_or_none("disk_path"),
            disk_free_bytes=f.integer_or_none("disk_free_bytes"),
            ephemeral_ports=(span[0], span[1]) if span else None,
        )

    def to_json(self) -> JsonObject:
        """The host fields as ``facts.py`` prints them."""
        return {
            "hostname": self.hostname,
            "hostname_addresses": list(self.hostname_addresses),
            "dev_shm_bytes": self.dev_shm_bytes,
            "memlock_bytes": self.memlock_bytes,
            "nofile": self.nofile,
            "disk_path": self.disk_path,
            "disk_free_bytes": self.disk_free_bytes,
            "ephemeral_ports": None if self.ephemeral_ports is None else list(self.ephemeral_ports),
        }


@dataclass(frozen=True)
class SoftwareFacts:
    """The node's Python and the versions of the packages preflight compares.

    Attributes:
        versions: Package -> version (None: not installed); ``python`` included.
        python_executable: The Python that ran the facts script.
    """

    versions: Mapping[str, str | None] = field(default_factory=dict)
    python_executable: str | None = None

    def version(self, name: str) -> str | None:
        """The version of ``name`` (None: not installed, or not asked)."""
        return self.versions.get(name)

    @classmethod
    def read(cls, f: Fields) -> SoftwareFacts:
        """Read the software fields of a facts answer."""
        versions = f.nested_or_none("versions")
        return cls(
            versions={}
            if versions is None
            else {k: versions.text_or_none(k) for k in versions.data},
            python_executable=f.text_or_none("python_executable"),
        )


@dataclass(frozen=True)
class PortReach:
    """One TCP connection attempt from the node to a peer's Ray port."""

    ok: bool
    ms: float | None = None
    error: str | None = None

    @classmethod
    def read(cls, f: Fields) -> PortReach:
        """Read one entry of ``reach``."""
        return cls(f.flag("ok"), f.number_or_none("ms"), f.text_or_none("error"))

    def to_json(self) -> JsonObject:
        """The entry as ``facts.py`` prints it."""
        if self.ok:
            return {"ok": True, "ms": self.ms}
        return {"ok": False, "error": self.error}


@dataclass(frozen=True)
class NodeFacts:
    """One node's answer to ``facts.py``: everything preflight grades.

    Attributes:
        node: The node's name in the inventory.
        host: Shared memory, limits, name resolution, disk and ports.
        software: Python and package versions.
        wall_s: The node's clock (``time.time()``) when it gathered the facts.
        reach: ``dst:port-name`` -> the connection attempt to it.
        gpus: The node's GPUs.
        kernel_log: The kernel log's XID lines (None: not sent).
        dcgm: The DCGM diagnostic's run (None: not asked for).
        ib_ports: The RDMA ports' sysfs files, ``mlx5_0/1/state`` -> text (None: not
            sent; empty: no RDMA device).
        ray_files: The env file ``rtk up`` left for Ray (``env``) and the TLS
            certificate and CA it names (``cert``, ``ca``), as text; a file missing is
            left out (None: not asked for).
    """

    node: str
    host: HostFacts
    software: SoftwareFacts
    wall_s: float
    reach: Mapping[str, PortReach] = field(default_factory=dict)
    gpus: GpuFacts = field(default_factory=GpuFacts)
    kernel_log: KernelLogFacts | None = None
    dcgm: DcgmFacts | None = None
    ib_ports: Mapping[str, str] | None = None
    ray_files: Mapping[str, str] | None = None

    @classmethod
    def from_json(cls, node: str, data: Any) -> NodeFacts:
        """Read the facts answer of ``node``.

        Raises:
            ClusterError: A field is missing or of the wrong type (named with the node).
        """
        f = answer_fields(node, WHAT, data)
        gpus = f.nested_or_none("gpus")
        kernel_log = f.nested_or_none("kernel_log")
        dcgm = f.nested_or_none("dcgm")
        return cls(
            node=node,
            host=HostFacts.read(f),
            software=SoftwareFacts.read(f),
            wall_s=f.number("wall_s"),
            reach={k: PortReach.read(v) for k, v in f.children("reach").items()},
            gpus=GpuFacts() if gpus is None else GpuFacts.read(gpus),
            kernel_log=None if kernel_log is None else KernelLogFacts.read(kernel_log),
            dcgm=None if dcgm is None else DcgmFacts.read(dcgm),
            ib_ports=f.text_map("ib_ports") if f.data.get("ib_ports") is not None else None,
            ray_files=f.text_map("ray_files") if f.data.get("ray_files") is not None else None,
        )

    def to_json(self) -> JsonObject:
        """The answer as ``facts.py`` prints it (``from_json`` reads it back)."""
        out = self.host.to_json() | {
            "versions": dict(self.software.versions),
            "python_executable": self.software.python_executable,
            "wall_s": self.wall_s,
            "reach": {k: r.to_json() for k, r in self.reach.items()},
            "gpus": self.gpus.to_json(),
        }
        if self.kernel_log is not None:
            out["kernel_log"] = self.kernel_log.to_json()
        if self.ib_ports is not None:
            out["ib_ports"] = dict(self.ib_ports)
        if self.dcgm is not None:
            out["dcgm"] = self.dcgm.to_json()
        if self.ray_files is not None:
            out["ray_files"] = dict(self.ray_files)
        return out
