"""traces.csv (``rtk report --csv``): every sample on the head's timeline, one row each.

Written node by node (each node's samples in time order), so it needs one node's
samples in memory at a time. The traces themselves (``telemetry/nodes/*/trace-*.arrows``)
hold the same samples at a tenth of the size; the CSV is for tools that read nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from toolkit.rundir.traces import EXTRA, READINGS, read_table
from toolkit.telemetry.report.build import Report

LEADING = ("node", "device", "kind", "t_s", "wall_s", "mono_s", "power_source")
COLUMNS = (*LEADING, *READINGS, EXTRA)


def write_traces(report: Report, path: Path) -> int:
    """Write every sample to ``path``; returns the row count.

    ``t_s`` is seconds since the window's start on the head's timeline; ``wall_s`` and
    ``mono_s`` are as the node wrote them. A reading a sample lacks is an empty cell;
    ``extra`` holds, as JSON, what a sensor reported beyond the documented readings.
    """
    start_s = report.window.start_s
    rows = 0
    schema = pa.schema(
        [
            pa.field("node", pa.string()),
            pa.field("device", pa.string()),
            pa.field("kind", pa.string()),
            pa.field("t_s", pa.float64()),
            pa.field("wall_s", pa.float64()),
            pa.field("mono_s", pa.float64()),
            pa.field("power_source", pa.string()),
            *(pa.field(name, pa.float64()) for name in READINGS),
            pa.field(EXTRA, pa.string()),
        ]
    )
    with pacsv.CSVWriter(str(path), schema) as writer:
        for node, files in report.data.traces.items():
            table = read_table(files)
            if table.num_rows == 0:
                continue
            table = table.take(pc.sort_indices(table, [("wall_s", "ascending")]))
            offset_s = report.timeline.offsets_s.get(node, 0.0)
            t_s = pc.subtract(table.column("wall_s"), offset_s + start_s)
            columns = {
                "node": pa.array([node] * table.num_rows, pa.string()),
                "t_s": t_s,
                **{name: table.column(name) for name in COLUMNS if name not in ("node", "t_s")},
            }
            writer.write_table(pa.table([columns[f.name] for f in schema], schema=schema))
            rows += table.num_rows
    return rows
