"""alike_nodes.py: nodes that are alike grouped, the others standing alone.

The 12-node run of conftest.py's ``many``: node004's sampler dies at 6 s, node006's GPU
counters count 40% more than their power, node008 throttles from 2 s to 8 s. Expected
figures come from the report's own numbers.
"""

from __future__ import annotations

import numpy as np

from toolkit.telemetry.report import Report
from toolkit.telemetry.report.alike_nodes import group_nodes


def test_alike_nodes_are_grouped_and_the_others_stand_alone(many: Report) -> None:
    named = {"node008"}  # as the outliers name it (all its GPUs throttled)
    groups = group_nodes(list(many.nodes.values()), named)
    [alike] = [g for g in groups if g.alike]
    differ = [g.names for g in groups if not g.alike]
    assert differ == [["node004"], ["node006"], ["node008"]]
    assert alike.names == [n for n in many.nodes if n not in ("node004", "node006", "node008")]
    energies = [n.energy_j for n in alike.nodes]
    assert max(energies) / min(energies) < 1.15
    assert many.nodes["node006"].energy_j > 1.15 * float(np.median(energies))
