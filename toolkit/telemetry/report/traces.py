"""traces.csv: every sample, on the head's timeline, one row each."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from toolkit.telemetry.report.build import Report

# The documented fields first (docs/telemetry.md), then any others in name order.
FIELDS = (
    "power_w",
    "power_source",
    "nvml_ts_us",
    "energy_j",
    "rapl_package_j",
    "rapl_dram_j",
    "power_limit_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "gpu_util_pct",
    "mem_util_pct",
    "memory_used_bytes",
    "memory_total_bytes",
    "clocks_event_reasons",
    "pcie_tx_kbs",
    "pcie_rx_kbs",
    "nvlink_tx_kib",
    "nvlink_rx_kib",
    "cpu_util_pct",
)
LEADING = ("node", "device", "kind", "t_s", "wall_s", "mono_s")


def write_traces(report: Report, path: Path) -> int:
    """Write every sample to ``path``, sorted by time; returns the row count.

    ``t_s`` is seconds since the window's start on the head's timeline; ``wall_s`` and
    ``mono_s`` are as the node wrote them. A field a sample lacks is an empty cell.
    """
    start_s = report.window.start_s
    rows: list[tuple[float, str, dict[str, Any]]] = []
    seen: set[str] = set()
    for node, samples in report.data.samples.items():
        offset_s = report.timeline.offsets_s.get(node, 0.0)
        for sample in samples:
            rows.append((float(sample["wall_s"]) - offset_s - start_s, node, sample))
            seen.update(sample)
    rows.sort(key=lambda row: row[0])
    extra = sorted(seen - set(FIELDS) - set(LEADING))
    columns = [*LEADING, *(f for f in FIELDS if f in seen), *extra]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        for t_s, node, sample in rows:
            writer.writerow(
                [node, sample.get("device"), sample.get("kind"), f"{t_s:.6f}"]
                + [_cell(sample.get(name)) for name in columns[4:]]
            )
    return len(rows)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)
