"""A node's samples as per-device arrays on the head's timeline, read column by column.

The report never turns samples into Python objects: a node's traces are read with the
columns the report uses, grouped by device with one stable sort, and handed over as
numpy arrays (``DeviceSeries``). One node at a time: what the report keeps of a node
after its figures are computed is small (``figures/views.py``), so memory is bounded by
the largest node's trace, not by the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from toolkit.rundir.devices import DeviceInfo, HostInfo
from toolkit.rundir.traces import READINGS, ReadStats, read_table

FloatArray = npt.NDArray[np.float64]

# What the report reads of a trace; the other readings stay on disk.
USED_READINGS = (
    "power_w",
    "energy_j",
    "rapl_package_j",
    "clocks_event_reasons",
    "gpu_util_pct",
    "cpu_util_pct",
    "sm_clock_mhz",
    "temperature_c",
    "power_limit_w",  # a straggler's cause (figures/straggler_causes.py)
)
REPORT_COLUMNS = ("wall_s", "device", "power_source", *USED_READINGS)
assert set(USED_READINGS) <= set(READINGS)


@dataclass(frozen=True)
class DeviceSeries:
    """One device's samples on the head's timeline, sorted by time.

    Attributes:
        node: The node the device is on.
        device: ``host`` or the GPU/MIG UUID.
        kind: ``host`` or ``gpu``.
        t_s: Head-timeline time of every sample.
        fields: Reading -> its value per sample, NaN where the sample lacks it (only
            readings some sample has).
        power_source: How ``power_w`` was obtained (``nvml_instant``, ``model``, ...).
        info: The manifest's record of the device (None: the manifest lacks it).
    """

    node: str
    device: str
    kind: str
    t_s: FloatArray
    fields: dict[str, FloatArray]
    power_source: str | None
    info: DeviceInfo | None

    def values(self, name: str) -> tuple[FloatArray, FloatArray]:
        """The times and values of the samples that have field ``name``."""
        values = self.fields.get(name)
        if values is None:
            return np.empty(0), np.empty(0)
        have = ~np.isnan(values)
        return self.t_s[have], values[have]


@dataclass(frozen=True)
class SampleSpan:
    """A node's samples at a glance: how many, first and last (head timeline)."""

    samples: int
    first_s: float | None
    last_s: float | None


def sample_span(files: list[Path], offset_s: float) -> SampleSpan:
    """Count a node's samples and find its first and last, reading one column."""
    times = read_table(files, columns=["wall_s"]).column("wall_s")
    if len(times) == 0:
        return SampleSpan(0, None, None)
    low_high = pc.min_max(times)
    return SampleSpan(
        len(times),
        float(low_high["min"].as_py()) - offset_s,
        float(low_high["max"].as_py()) - offset_s,
    )


def read_series(
    node: str,
    files: list[Path],
    offset_s: float,
    devices: Mapping[str, DeviceInfo],
    notes: list[str],
) -> dict[str, DeviceSeries]:
    """Every device of ``node`` (every manifest device, even one without samples).

    Args:
        node: The node's name.
        files: Its traces, in order.
        offset_s: Subtracted from its times to put them on the head's timeline.
        devices: The manifest's devices of the node, in order.
        notes: Receives what was odd about the files (cut streams, bad lines).
    """
    stats = ReadStats()
    table = read_table(files, stats, REPORT_COLUMNS)
    if stats.bad_lines:
        notes.append(f"{files[0]}: {stats.bad_lines} unreadable line(s) skipped")
    notes.extend(stats.truncated)
    codes, names = value_codes(table.column("device"))
    wall_s = table.column("wall_s").to_numpy()
    order = np.lexsort((wall_s, codes))  # by device, then time; stable for equal times
    codes, t_s = codes[order], wall_s[order] - offset_s
    bounds = np.searchsorted(codes, np.arange(len(names) + 1))
    readings = {name: _floats(table.column(name))[order] for name in USED_READINGS}
    sources = table.column("power_source")
    source_codes, source_names = value_codes(sources)
    source_codes = source_codes[order]
    found = {name: (int(bounds[i]), int(bounds[i + 1])) for i, name in enumerate(names)}
    out: dict[str, DeviceSeries] = {}
    for device in [*devices, *sorted(set(found) - set(devices))]:
        lo, hi = found.get(device, (0, 0))
        info = devices.get(device)
        fields = {
            name: values[lo:hi]
            for name, values in readings.items()
            if hi > lo and not np.isnan(values[lo:hi]).all()
        }
        kind = info.kind if info is not None else ("host" if device == "host" else "gpu")
        out[device] = DeviceSeries(
            node=node,
            device=device,
            kind="host" if kind == "host" else "gpu",
            t_s=t_s[lo:hi],
            fields=fields,
            power_source=_most_common(source_codes[lo:hi], source_names) or _info_source(info),
            info=info,
        )
    return out


def value_codes(column: pa.ChunkedArray) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Codes into the distinct values (-1 for null), and the values."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    indices = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return indices, [str(v) for v in encoded.dictionary.to_pylist()]


def _floats(column: pa.ChunkedArray) -> FloatArray:
    values: FloatArray = column.to_numpy().astype(np.float64, copy=False)
    return values


def _most_common(codes: npt.NDArray[np.int64], names: list[str]) -> str | None:
    """The most frequent value (ties: the first in name order); None if all null."""
    codes = codes[codes >= 0]
    if codes.size == 0:
        return None
    counts = np.bincount(codes, minlength=len(names))
    return names[min(range(len(names)), key=lambda i: (-counts[i], names[i]))]


def _info_source(info: DeviceInfo | None) -> str | None:
    """The power source the manifest names (the host's; a GPU's is in its samples)."""
    return (info.power_source or None) if isinstance(info, HostInfo) else None
