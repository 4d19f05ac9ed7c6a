"""What the bandwidth job is asked: the nodes, the test's length, retries, sizes, thresholds.

The host (``toolkit.preflight.runner.run_bandwidth``) writes it (``to_json``) as the
job's one argument; the job (``job``) reads it back once (``from_json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.preflight.checks import Thresholds
from toolkit.rundir.record_base import record_fields


@dataclass(frozen=True)
class BandwidthJobOptions:
    """The bandwidth job's options.

    Attributes:
        nodes: The inventory's nodes to measure, in ring order.
        duration_s: How long each TCP test sends.
        retries: How many times a pair below the thresholds is measured again.
        thresholds: What counts as good (the job uses the bandwidth ones).
        sizes_bytes: The all-reduce sizes (None: by backend, ``measure.default_sizes``).
        busbw_expected_min_gb_s: The least busbw the hardware should reach (None: unknown).
    """

    nodes: tuple[str, ...]
    duration_s: float
    retries: int
    thresholds: Thresholds = field(default_factory=Thresholds)
    sizes_bytes: tuple[int, ...] | None = None
    busbw_expected_min_gb_s: float | None = None

    def to_json(self) -> JsonObject:
        """As the job's argument."""
        return {
            "nodes": list(self.nodes),
            "duration_s": self.duration_s,
            "retries": self.retries,
            "sizes_bytes": None if self.sizes_bytes is None else list(self.sizes_bytes),
            "busbw_expected_min_gb_s": self.busbw_expected_min_gb_s,
            "thresholds": asdict(self.thresholds),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "bandwidth job options") -> BandwidthJobOptions:
        """The inverse of ``to_json``.

        Raises:
            RunDirError: A field is missing or of the wrong type; the error names it.
        """
        f = record_fields(data, where)
        sizes = f.integers("sizes_bytes") if f.data.get("sizes_bytes") is not None else None
        return cls(
            nodes=f.texts("nodes", required=True),
            duration_s=f.number("duration_s"),
            retries=f.integer("retries"),
            thresholds=thresholds_from(f.nested("thresholds")),
            sizes_bytes=sizes,
            busbw_expected_min_gb_s=f.number_or_none("busbw_expected_min_gb_s"),
        )


def thresholds_from(f: Fields) -> Thresholds:
    """``Thresholds`` from their JSON (``asdict``); a threshold not given is its default."""
    d = Thresholds()
    return Thresholds(
        dev_shm_fail_bytes=_integer(f, "dev_shm_fail_bytes", d.dev_shm_fail_bytes),
        dev_shm_warn_bytes=_integer(f, "dev_shm_warn_bytes", d.dev_shm_warn_bytes),
        nofile_fail=_integer(f, "nofile_fail", d.nofile_fail),
        nofile_warn=_integer(f, "nofile_warn", d.nofile_warn),
        disk_fail_bytes=_integer(f, "disk_fail_bytes", d.disk_fail_bytes),
        disk_warn_bytes=_integer(f, "disk_warn_bytes", d.disk_warn_bytes),
        clock_warn_s=_number(f, "clock_warn_s", d.clock_warn_s),
        clock_fail_s=_number(f, "clock_fail_s", d.clock_fail_s),
        tcp_min_gbit_s=_number(f, "tcp_min_gbit_s", d.tcp_min_gbit_s),
        tcp_min_fraction=_number(f, "tcp_min_fraction", d.tcp_min_fraction),
        busbw_min_gb_s=_number(f, "busbw_min_gb_s", d.busbw_min_gb_s),
    )


def _integer(f: Fields, key: str, default: int) -> int:
    value = f.integer_or_none(key)
    return default if value is None else value


def _number(f: Fields, key: str, default: float) -> float:
    value = f.number_or_none(key)
    return default if value is None else value
