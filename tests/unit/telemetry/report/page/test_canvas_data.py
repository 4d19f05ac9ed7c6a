"""page/canvas_data.py: the grid report.html's canvas draws, quantised and embedded.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import numpy as np

from toolkit.telemetry.report import Report
from toolkit.telemetry.report.grid import device_grid, node_power
from toolkit.telemetry.report.page.canvas_data import decode, encode, page_data


def test_quantised_values_come_back_within_a_step() -> None:
    values = np.array([[80.0, 300.5, np.nan, 700.0], [123.4, np.nan, 650.0, 80.0]])
    for width, step in ((2, 620 / 65534), (1, 620 / 254)):
        text = encode(values, 80.0, 700.0, width)
        back = decode(text, 80.0, 700.0, width).reshape(values.shape)
        assert np.array_equal(np.isnan(back), np.isnan(values))
        known = ~np.isnan(values)
        assert np.abs(back[known] - values[known]).max() <= step / 2 + 1e-9


def test_page_data_is_the_grid(many: Report) -> None:
    grid = device_grid(many)
    data = page_data(many, grid)
    gpus = [(n.name, d) for n in many.nodes.values() for d in n.devices if d != "host"]
    assert grid.rows == gpus and len(data["devices"]) == 2 * len(many.nodes)
    assert data["nodes"] == list(many.nodes) and data["node_rows"][3] == [6, 2]
    assert data["row_node"][6:8] == [3, 3]
    assert [layer["name"] for layer in data["layers"]] == [
        "power_w",
        "sm_clock_mhz",
        "temperature_c",
        "throttled",
        "gpu_util_pct",
    ]
    for layer in data["layers"]:
        back = decode(layer["data"], layer["lo"], layer["hi"], layer["bytes"])
        expected = grid.values[layer["name"]].ravel()
        assert np.array_equal(np.isnan(back), np.isnan(expected))
        span = (layer["hi"] - layer["lo"]) or 1.0
        assert np.nanmax(np.abs(back - expected)) <= span / 254
    # node004 stops at 6 s: its rows are blank after that, the node total too.
    power = grid.values["power_w"]
    late = grid.buckets is not None and int(7.0 / grid.buckets.width_s)
    assert np.isnan(power[6:8, late:]).all() and not np.isnan(power[6:8, :late]).all()
    names, totals = node_power(many)
    assert np.isnan(totals[names.index("node004"), late:]).all()
    assert data["barriers"] == [many.relative_s(b.t_s) for b in many.barriers]
