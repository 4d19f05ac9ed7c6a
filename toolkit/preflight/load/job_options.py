"""What the per-node load job is asked: the nodes, the GEMM's precision and length, sizes.

The host (``toolkit.preflight.runner``) writes it (``to_json``) as the job's one
argument; the job (``job``) reads it back once (``from_json``).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import record_fields


@dataclass(frozen=True)
class LoadJobOptions:
    """The load job's options.

    Attributes:
        nodes: The inventory's nodes to test.
        precision: The GEMM's precision on GPUs (``bf16``, ...).
        duration_s: How long the GEMM runs.
        gpu_sizes_bytes: The intra-node all-reduce's sizes on GPUs (None: the job's).
        cpu_sizes_bytes: Its sizes on CPU ranks (None: the job's).
    """

    nodes: tuple[str, ...]
    precision: str
    duration_s: float
    gpu_sizes_bytes: tuple[int, ...] | None = None
    cpu_sizes_bytes: tuple[int, ...] | None = None

    def to_json(self) -> JsonObject:
        """As the job's argument (sizes not given left out)."""
        out: JsonObject = {
            "nodes": list(self.nodes),
            "precision": self.precision,
            "duration_s": self.duration_s,
        }
        if self.gpu_sizes_bytes is not None:
            out["gpu_sizes_bytes"] = list(self.gpu_sizes_bytes)
        if self.cpu_sizes_bytes is not None:
            out["cpu_sizes_bytes"] = list(self.cpu_sizes_bytes)
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "load job options") -> LoadJobOptions:
        """The inverse of ``to_json``.

        Raises:
            RunDirError: A field is missing or of the wrong type; the error names it.
        """
        f = record_fields(data, where)
        gpu_sizes, cpu_sizes = f.integers("gpu_sizes_bytes"), f.integers("cpu_sizes_bytes")
        return cls(
            nodes=f.texts("nodes", required=True),
            precision=f.text("precision"),
            duration_s=f.number("duration_s"),
            gpu_sizes_bytes=gpu_sizes if f.data.get("gpu_sizes_bytes") is not None else None,
            cpu_sizes_bytes=cpu_sizes if f.data.get("cpu_sizes_bytes") is not None else None,
        )
