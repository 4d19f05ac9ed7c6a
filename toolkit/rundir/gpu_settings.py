"""The GPU settings a node took for a run: what ``gpu_control.py apply`` answered.

The node script (``toolkit/node/gpu_control.py``, stdlib only) prints its answer as
JSON; ``toolkit.gpu.limits_over_ssh`` reads each node's ``result`` once into a
``NodeGpuSettings`` (errors naming the node), and the sweep keeps them, per node, in
the run's ``profile_run.json`` (``ProfileRunRecord.gpu_settings``), read back with
the run directory's errors. ``to_json`` writes what the script printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import Record, record_fields

ClocksMhz = tuple[int, int]
"""A clock lock: ``(min, max)`` in MHz."""


@dataclass(frozen=True)
class GpuApplied:
    """What was set on one GPU (None: not asked).

    Attributes:
        index: NVML's index of the GPU on its node.
        power_limit_w: The power limit set.
        previous_power_limit_w: The limit before, put back afterwards.
        gpu_clocks_mhz: The SM clocks locked.
        mem_clocks_mhz: The memory clocks locked.
    """

    index: int
    power_limit_w: float | None = None
    previous_power_limit_w: float | None = None
    gpu_clocks_mhz: ClocksMhz | None = None
    mem_clocks_mhz: ClocksMhz | None = None

    def to_json(self) -> JsonObject:
        """As ``gpu_control.py`` prints it: the settings not asked left out."""
        out: JsonObject = {"index": self.index}
        if self.power_limit_w is not None:
            out["power_limit_w"] = self.power_limit_w
        if self.previous_power_limit_w is not None:
            out["previous_power_limit_w"] = self.previous_power_limit_w
        if self.gpu_clocks_mhz is not None:
            out["gpu_clocks_mhz"] = list(self.gpu_clocks_mhz)
        if self.mem_clocks_mhz is not None:
            out["mem_clocks_mhz"] = list(self.mem_clocks_mhz)
        return out

    @classmethod
    def from_fields(cls, f: Fields) -> GpuApplied:
        """The inverse of ``to_json``; errors are ``f``'s."""
        return cls(
            index=f.integer("index"),
            power_limit_w=f.number_or_none("power_limit_w"),
            previous_power_limit_w=f.number_or_none("previous_power_limit_w"),
            gpu_clocks_mhz=_clocks(f, "gpu_clocks_mhz"),
            mem_clocks_mhz=_clocks(f, "mem_clocks_mhz"),
        )


def _clocks(f: Fields, key: str) -> ClocksMhz | None:
    if f.data.get(key) is None:
        return None
    pair = f.integers(key)
    if len(pair) != 2:
        raise f.fail(key, "[MIN, MAX] in MHz")
    return pair[0], pair[1]


@dataclass(frozen=True)
class NodeGpuSettings(Record):
    """One node's GPU settings for a run (``gpu_control.py apply``'s result).

    Attributes:
        node: The node's name.
        restore_file: Where the node keeps what to put back.
        gpus: GPU UUID -> what was set on it.
        warnings: What the node warned of (persistence mode off...).
    """

    node: str
    restore_file: str
    gpus: Mapping[str, GpuApplied] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        """As ``gpu_control.py`` prints it."""
        return {
            "node": self.node,
            "restore_file": self.restore_file,
            "gpus": {uuid: gpu.to_json() for uuid, gpu in self.gpus.items()},
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_fields(cls, f: Fields) -> NodeGpuSettings:
        """The inverse of ``to_json``; errors are ``f``'s (a node's, or a record's)."""
        return cls(
            node=f.text("node"),
            restore_file=f.text("restore_file"),
            gpus={uuid: GpuApplied.from_fields(g) for uuid, g in f.children("gpus").items()},
            warnings=f.texts("warnings"),
        )

    @classmethod
    def from_json(cls, data: object, where: str = "gpu_settings") -> NodeGpuSettings:
        """The inverse of ``to_json``, with the run directory's errors."""
        return cls.from_fields(record_fields(data, where))
