"""Telemetry traces: one owner for the sample file format (docs/telemetry.md).

A trace is an Arrow IPC stream with one fixed schema: the
sample's times, device and kind, then every documented reading as a nullable float64
column (integers such as clocks and bitmasks are exact in float64), and ``extra``, a
JSON object of any key the schema does not name, so nothing a sensor reports is lost.

Two batch sizes, one format:

- Live, on the node: ``TraceWriter`` writes one uncompressed record batch per flush
  (about a second) and flushes it to the operating system, so a killed sampler loses
  at most that much. A stream cut mid-batch is read up to its last whole batch.
  Uncompressed, because compressing each column of a one-second batch costs the
  sampler ten times its other work; the node's copy is temporary.
- Collected, in the run directory: ``compact`` rewrites a live stream in batches of
  up to ``COMPACT_ROWS`` rows with zstd (about 7x smaller, and 10x faster to read),
  streaming, so neither side ever holds a whole trace.

A node's traces in the run directory are ``telemetry/nodes/<node>/trace-NNN.arrows``,
one per collection (a resumed run adds one); runs recorded before this format have
``samples.jsonl`` there instead, which ``read_trace`` reads into the same schema.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.ipc as ipc

from toolkit.rundir.reading import Reading
from toolkit.rundir.trace_files import TRACE_SUFFIX

COMPACT_ROWS = 65_536
FORMAT_VERSION = "1"

# The columns every sample has.
TIME_COLUMNS = ("wall_s", "mono_s")
TEXT_COLUMNS = ("device", "kind", "power_source")
# Documented readings (docs/telemetry.md), in the order the CSV export lists them.
READINGS = (
    "power_w",
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
EXTRA = "extra"

SCHEMA = pa.schema(
    [
        *(pa.field(name, pa.float64(), nullable=False) for name in TIME_COLUMNS),
        pa.field("device", pa.string(), nullable=False),
        pa.field("kind", pa.string()),
        pa.field("power_source", pa.string()),
        *(pa.field(name, pa.float64()) for name in READINGS),
        pa.field(EXTRA, pa.string()),
    ],
    metadata={"rtk_trace": FORMAT_VERSION},
)
_LIVE_OPTIONS = ipc.IpcWriteOptions()
_COMPACT_OPTIONS = ipc.IpcWriteOptions(compression="zstd")
_KNOWN = frozenset((*TIME_COLUMNS, *TEXT_COLUMNS, *READINGS))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


class _Columns:
    """Rows gathered column by column until they become one record batch."""

    def __init__(self) -> None:
        self.rows = 0
        self.values: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}

    def add(self, row: Mapping[str, Any]) -> bool:
        """Add one sample; False (and nothing added) without a time and a device."""
        wall_s, mono_s = _number(row.get("wall_s")), _number(row.get("mono_s"))
        device = row.get("device")
        if wall_s is None or not isinstance(device, str):
            return False
        values = self.values
        values["wall_s"].append(wall_s)
        values["mono_s"].append(math.nan if mono_s is None else mono_s)
        values["device"].append(device)
        for name in ("kind", "power_source"):
            text = row.get(name)
            values[name].append(None if text is None else str(text))
        extra: dict[str, object] = {}
        for name in READINGS:
            value = row.get(name)
            number = _number(value)
            values[name].append(number)
            if number is None and value is not None:
                extra[name] = value  # a reading that is not a number is kept as said
        for key, value in row.items():
            if key not in _KNOWN:
                extra[key] = value
        values[EXTRA].append(json.dumps(extra, default=str) if extra else None)
        self.rows += 1
        return True

    def add_reading(self, reading: Reading, wall_s: float, mono_s: float) -> None:
        """Add one sensor reading taken at ``wall_s``/``mono_s`` (the sampler's path)."""
        values = self.values
        values["wall_s"].append(wall_s)
        values["mono_s"].append(mono_s)
        values["device"].append(reading.device)
        values["kind"].append(reading.kind)
        values["power_source"].append(reading.power_source)
        extra: dict[str, object] | None = None
        for name in READINGS:
            value = getattr(reading, name)
            if value is None:
                values[name].append(None)
            elif math.isfinite(value):
                values[name].append(float(value))
            else:  # kept as said, as ``add`` keeps a reading that is no finite number
                values[name].append(None)
                extra = {**(extra or {}), name: value}
        if reading.extra:
            extra = {**(extra or {}), **reading.extra}
        values[EXTRA].append(json.dumps(extra, default=str) if extra else None)
        self.rows += 1

    def batch(self) -> pa.RecordBatch:
        """The gathered rows as one record batch; the gatherer starts empty again."""
        arrays = [pa.array(self.values[f.name], type=f.type) for f in SCHEMA]
        self.values = {name: [] for name in SCHEMA.names}
        self.rows = 0
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


class TraceWriter:
    """Append samples to a live trace; each ``flush`` writes one batch to the OS.

    A file already there is kept: the new stream goes beside it as ``NAME.N.arrows``
    (an IPC stream cannot be appended to), and ``live_files`` lists them all.
    """

    def __init__(self, path: Path) -> None:
        """Open ``path`` (or the next free ``NAME.N.arrows`` beside it) for writing."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = _free_path(path)
        self._file: IO[bytes] = self.path.open("wb")
        self._writer = ipc.new_stream(self._file, SCHEMA, options=_LIVE_OPTIONS)
        self._columns = _Columns()
        self.rows_written = 0
        self.rows_rejected = 0

    def write(self, row: Mapping[str, Any]) -> None:
        """Buffer one sample given as JSON (a reading's fields plus ``wall_s``/``mono_s``).

        A row without a number ``wall_s`` and a text ``device`` is counted in
        ``rows_rejected``, not written.
        """
        if not self._columns.add(row):
            self.rows_rejected += 1

    def write_reading(self, reading: Reading, wall_s: float, mono_s: float) -> None:
        """Buffer one sensor reading taken at ``wall_s``/``mono_s``."""
        self._columns.add_reading(reading, wall_s, mono_s)

    @property
    def pending(self) -> int:
        """Samples buffered since the last flush."""
        return self._columns.rows

    def flush(self) -> None:
        """Write the buffered samples as one batch and hand them to the OS."""
        if self._columns.rows:
            rows = self._columns.rows
            self._writer.write_batch(self._columns.batch())
            self.rows_written += rows
        self._file.flush()

    def close(self) -> None:
        """Flush, end the stream and close the file."""
        self.flush()
        self._writer.close()
        self._file.close()


def _free_path(path: Path) -> Path:
    if not path.exists():
        return path
    stem = path.name.removesuffix(TRACE_SUFFIX)
    n = 1
    while (candidate := path.with_name(f"{stem}.{n}{TRACE_SUFFIX}")).exists():
        n += 1
    return candidate


def live_files(path: Path) -> list[Path]:
    """The live stream at ``path`` and any later ones ``TraceWriter`` put beside it."""
    stem = path.name.removesuffix(TRACE_SUFFIX)
    later: list[tuple[int, Path]] = []
    for candidate in path.parent.glob(f"{stem}.*{TRACE_SUFFIX}"):
        number = candidate.name[len(stem) + 1 : -len(TRACE_SUFFIX)]
        if number.isdigit():
            later.append((int(number), candidate))
    return ([path] if path.exists() else []) + [p for _, p in sorted(later)]


@dataclass
class ReadStats:
    """What reading traces found besides the samples.

    Attributes:
        rows: Samples read.
        truncated: Files that ended inside a batch (a killed writer); read up to it.
        bad_lines: Lines of a legacy JSON-lines file that were not a sample.
        files: Files read.
    """

    rows: int = 0
    truncated: list[str] = field(default_factory=list)
    bad_lines: int = 0
    files: int = 0


def iter_batches(
    paths: Iterable[Path], stats: ReadStats | None = None, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """Every sample in ``paths`` (traces or legacy JSON lines), batch by batch.

    Args:
        paths: Files in order.
        stats: Filled with what was read, when given.
        columns: Only these columns (all when None).
    """
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        stats.files += 1
        batches = _legacy_batches(path, stats) if path.suffix == ".jsonl" else _stream(path, stats)
        for batch in batches:
            stats.rows += batch.num_rows
            yield batch.select(list(columns)) if columns is not None else batch


def _stream(path: Path, stats: ReadStats) -> Iterator[pa.RecordBatch]:
    try:
        source = pa.memory_map(str(path))
    except OSError:
        stats.truncated.append(f"{path}: unreadable")
        return
    with source:
        try:
            reader = ipc.open_stream(source)
        except (pa.ArrowException, ValueError, OSError):
            stats.truncated.append(f"{path}: no complete header")
            return
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowException, ValueError, OSError):
                stats.truncated.append(f"{path}: ends inside a batch; read up to it")
                return
            try:
                # The reader trusts a batch's offsets and lengths: a damaged one made
                # pyarrow's compute functions read out of bounds (a segfault). Checked
                # in full, it is refused here instead.
                batch.validate(full=True)
                conformed = _conform(batch)
            except (pa.ArrowException, ValueError):  # ValueError: names that are no UTF-8
                stats.truncated.append(f"{path}: a damaged batch; read up to it")
                return
            yield conformed


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch in this version's schema (columns a later or earlier writer lacked are null)."""
    if batch.schema.equals(SCHEMA, check_metadata=False):
        return batch
    arrays = [
        batch.column(f.name).cast(f.type)
        if f.name in batch.schema.names
        else pa.nulls(batch.num_rows, f.type)
        for f in SCHEMA
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def _legacy_batches(path: Path, stats: ReadStats) -> Iterator[pa.RecordBatch]:
    columns = _Columns()
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                stats.bad_lines += 1
                continue
            if not isinstance(row, dict) or not columns.add(row):
                stats.bad_lines += 1
                continue
            if columns.rows >= COMPACT_ROWS:
                yield columns.batch()
    if columns.rows:
        yield columns.batch()


def read_table(
    paths: Iterable[Path], stats: ReadStats | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """Every sample in ``paths`` as one table (schema ``SCHEMA``, or ``columns`` of it)."""
    schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in columns])
    return pa.Table.from_batches(list(iter_batches(paths, stats, columns)), schema=schema)


def compact(sources: Sequence[Path], target: Path, stats: ReadStats | None = None) -> int:
    """Rewrite ``sources`` into one stream of large batches at ``target``; rows written.

    Streams: at most ``COMPACT_ROWS`` rows are held at a time. The target is written
    beside its final name and renamed when complete, so a reader never sees half of it.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    rows = 0
    held: list[pa.RecordBatch] = []
    held_rows = 0
    with partial.open("wb") as out, ipc.new_stream(out, SCHEMA, options=_COMPACT_OPTIONS) as writer:
        for batch in iter_batches(sources, stats):
            held.append(batch)
            held_rows += batch.num_rows
            if held_rows >= COMPACT_ROWS:
                writer.write_table(pa.Table.from_batches(held).combine_chunks())
                rows += held_rows
                held, held_rows = [], 0
        if held:
            writer.write_table(pa.Table.from_batches(held).combine_chunks())
            rows += held_rows
    os.replace(partial, target)
    return rows


def row_dicts(batch: pa.RecordBatch) -> Iterator[dict[str, object]]:
    """A batch's samples as the sensors wrote them (null readings left out, extras merged).

    For small exports and tests: a report never turns samples into dicts.
    """
    for row in batch.to_pylist():
        extra = row.pop(EXTRA, None)
        sample = {k: v for k, v in row.items() if v is not None}
        if sample.get("mono_s") is not None and math.isnan(sample["mono_s"]):
            del sample["mono_s"]
        if extra:
            sample.update(json.loads(extra))
        yield sample
