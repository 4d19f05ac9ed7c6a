"""Stragglers: who arrives last at the barriers, and the energy the others burn waiting.

Every rank's barrier record says when the barrier let it go and how long it waited
(``wait_s``), so when it arrived. The rank that arrives last holds everyone else; the
others' GPUs draw power all the while. Per rank: its total wait, the energy its GPU
used while waiting (a rank without a GPU of its own is given its share of the host's),
and how often it was the last to arrive. A step without barrier records has its waits
at the step's collective derived from the ranks' backward phases
(``inputs/phase_markers.py``); they count here the same way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from toolkit.telemetry.report.figures.energy import NodeReport
from toolkit.telemetry.report.inputs.series import FloatArray
from toolkit.telemetry.report.inputs.spans import Waits


@dataclass(frozen=True)
class RankWaits:
    """One rank at the barriers.

    Attributes:
        rank: The rank.
        node: Its node.
        device: The device whose energy its waits are counted on (its GPU, or ``host``).
        barriers: Barriers (or steps' collectives) it waited at.
        wait_s: Its total wait.
        wait_energy_j: Energy its device used while it waited (its share, on a host);
            None when no curve covers it.
        last: Barriers (or collectives) at which it arrived last.
    """

    rank: int
    node: str
    device: str | None
    barriers: int
    wait_s: float
    wait_energy_j: float | None
    last: int


@dataclass(frozen=True)
class Stragglers:
    """Every rank's waiting, and who kept them waiting.

    Attributes:
        barriers: Barriers (or steps' collectives) at which two or more ranks waited.
        ranks: Per rank, in rank order.
        wait_s: All ranks' waits together.
        wait_energy_j: Energy used while waiting, all ranks together.
        share: ``wait_energy_j`` over the run's energy.
        last_by_node: Node -> barriers at which one of its ranks arrived last.
        sources: Where the waits came from: ``barriers``, ``backward`` (the step's
            collective, from backward phases), or both.
        from_backward: Of ``barriers``, the steps whose waits came from backward phases.
    """

    barriers: int
    ranks: list[RankWaits]
    wait_s: float
    wait_energy_j: float
    share: float | None
    last_by_node: dict[str, int]
    sources: tuple[str, ...] = ("barriers",)
    from_backward: int = 0

    @property
    def slowest(self) -> RankWaits | None:
        """The rank that arrived last most often (None without barriers)."""
        if not self.ranks or not self.barriers:
            return None
        return max(self.ranks, key=lambda r: (r.last, -r.rank))


class WaitEnergy:
    """The energy of every wait, filled in node by node while the curves exist.

    Any spans on ranks will do: the report measures the ranks' phases with it too.
    """

    def __init__(self, waits: Waits) -> None:
        """Every wait unmeasured yet."""
        self.waits = waits
        self.energy_j: FloatArray = np.full(len(waits), np.nan)
        self._device = np.full(len(waits), -1, dtype=np.int64)  # into _devices
        self._devices: list[str] = []

    def device(self, i: int) -> str | None:
        """The device wait ``i`` was measured on (None: unmeasured)."""
        code = int(self._device[i])
        return self._devices[code] if code >= 0 else None

    def add(self, node: NodeReport) -> None:
        """Measure the waits of ``node``'s ranks on its devices' curves."""
        waits = self.waits
        if node.name not in waits.nodes:
            return
        here = waits.node == waits.nodes.index(node.name)
        unmatched = here.copy()
        for i, uuid in enumerate(waits.devices):
            device = node.devices.get(uuid)
            curve = device.curve if device is not None else None
            if curve is None:
                continue
            mine = here & (waits.device == i)
            self._measure(mine, curve.energy_j(waits.enter_s[mine], waits.exit_s[mine]), uuid)
            unmatched &= ~mine
        host = node.devices.get("host")
        if host is not None and host.curve is not None and unmatched.any():
            # Ranks without a GPU here share the host: each counts 1/n of it.
            ranks = max(np.unique(waits.rank[unmatched]).size, 1)
            energy_j = host.curve.energy_j(waits.enter_s[unmatched], waits.exit_s[unmatched])
            self._measure(unmatched, energy_j / ranks, "host")

    def _measure(self, which: npt.NDArray[np.bool_], energy_j: FloatArray, device: str) -> None:
        self.energy_j[which] = energy_j
        if device not in self._devices:
            self._devices.append(device)
        self._device[which] = self._devices.index(device)


def stragglers(
    waits: Waits | None, energy: WaitEnergy | None, run_energy_j: float
) -> Stragglers | None:
    """Who arrived last and what waiting cost; None without barrier waits."""
    if waits is None or len(waits) == 0 or energy is None:
        return None
    order = np.lexsort((waits.enter_s, waits.step))
    steps = waits.step[order]
    last_of_step = order[np.append(steps[1:] != steps[:-1], True)]
    ranks_per_step = Counter(waits.step.tolist())
    last_of_step = np.array(
        [i for i in last_of_step.tolist() if ranks_per_step[int(waits.step[i])] >= 2],
        dtype=np.int64,
    )
    last_count = Counter(waits.rank[last_of_step].tolist())
    last_by_node = Counter(waits.nodes[int(n)] for n in waits.node[last_of_step].tolist())
    wait_s = waits.wait_s
    per_rank: list[RankWaits] = []
    for rank in sorted(set(waits.rank.tolist())):
        mine = np.flatnonzero(waits.rank == rank)
        joules = energy.energy_j[mine]
        measured = joules[~np.isnan(joules)]
        per_rank.append(
            RankWaits(
                rank=int(rank),
                node=waits.nodes[int(waits.node[mine[0]])],
                device=energy.device(int(mine[0])),
                barriers=int(mine.size),
                wait_s=float(wait_s[mine].sum()),
                wait_energy_j=float(measured.sum()) if measured.size else None,
                last=int(last_count.get(rank, 0)),
            )
        )
    total_j = float(np.nansum(energy.energy_j)) if len(waits) else 0.0
    derived = waits.backward
    from_backward = 0 if derived is None else int(derived[last_of_step].sum())
    return Stragglers(
        barriers=int(last_of_step.size),
        ranks=per_rank,
        wait_s=float(wait_s.sum()),
        wait_energy_j=total_j,
        share=total_j / run_energy_j if run_energy_j > 0 else None,
        last_by_node=dict(last_by_node.most_common()),
        sources=tuple(waits.sources),
        from_backward=from_backward,
    )
