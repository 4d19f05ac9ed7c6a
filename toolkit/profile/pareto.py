"""The configurations of a sweep that no other beats: the Pareto front, per unit of work.

Configurations of a sweep seldom do the same work: over the same steps, batch 16
trains on four times the tokens of batch 4, so its run takes longer and costs more
while every token is faster and cheaper. The front is therefore drawn on figures per
unit of work, throughput against energy per unit: tokens/s against J/token, or for
vLLM output tokens/s against J per output token. Only when the configurations share
no unit (a plain command counts none, or some count tokens and others do not) is it
drawn on time and energy per run, and ``ParetoBasis.note`` says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolkit.json_types import JsonObject

if TYPE_CHECKING:
    from toolkit.profile.results import ConfigRow

TOKEN = "token"
OUTPUT_TOKEN = "output token"  # vLLM: the tokens generated
_FALLBACK = (
    "the Pareto front is drawn on (time, energy) per run, which compares like with like"
    " only when every configuration does the same work"
)
_NAMED = 3  # configurations named in a note; the rest are counted


@dataclass(frozen=True)
class ParetoBasis:
    """The two figures the Pareto front is drawn on.

    Attributes:
        unit: The unit of work every configuration counts (``token`` or ``output token``):
            the front is on throughput against energy per unit. None: time and energy
            per run.
        note: Why the front is not drawn per unit of work; None when it is, or when no
            configuration has a succeeded repeat.
    """

    unit: str | None
    note: str | None = None

    @property
    def figures(self) -> tuple[str, str]:
        """The two ``ConfigRow`` figures: (throughput, energy per unit) or (time, energy)."""
        if self.unit is None:
            return ("time_s", "energy_j")
        return ("tokens_per_s", "energy_per_token_j")

    @property
    def better(self) -> tuple[str, str]:
        """Which way each figure is better: ``higher`` or ``lower``."""
        return ("lower", "lower") if self.unit is None else ("higher", "lower")

    @property
    def label(self) -> str:
        """``(tokens/s, J/token)``, ``(output tokens/s, J/output token)`` or ``(time, energy)``."""
        if self.unit is None:
            return "(time, energy)"
        return f"({self.unit}s/s, J/{self.unit})"

    def point(self, row: ConfigRow) -> tuple[float, float] | None:
        """The row's two figures, each turned so that lower is better; None without both."""
        x_name, y_name = self.figures
        x, y = row.metric(x_name).mean, row.metric(y_name).mean
        if not (math.isfinite(x) and math.isfinite(y)):
            return None
        return (x if self.unit is None else -x, y)

    def to_json(self) -> JsonObject:
        """As results.json has it."""
        return {
            "label": self.label,
            "unit": self.unit,
            "figures": list(self.figures),
            "better": list(self.better),
            "note": self.note,
        }


def pareto_basis(rows: Sequence[ConfigRow]) -> ParetoBasis:
    """What the front of ``rows`` is drawn on: their shared unit of work, else time and energy.

    Only configurations with a succeeded repeat count; each must count the same unit
    (``ConfigRow.work_unit``) for the front to be drawn per unit of work.
    """
    measured = [r for r in rows if r.repeats_ok]
    if not measured:
        return ParetoBasis(None)
    units = {r.work_unit for r in measured}
    if len(units) == 1 and None not in units:
        return ParetoBasis(units.pop())
    without = [r.config_id for r in measured if r.work_unit is None]
    if len(without) == len(measured):
        return ParetoBasis(None, f"no configuration counts tokens: {_FALLBACK}")
    if without:
        return ParetoBasis(
            None,
            f"{len(without)} of {len(measured)} configurations count no tokens"
            f" ({_names(without)}): {_FALLBACK}",
        )
    kinds = ", ".join(sorted(u for u in units if u is not None))
    return ParetoBasis(None, f"the configurations count different units ({kinds}): {_FALLBACK}")


def _names(config_ids: Sequence[str]) -> str:
    named = ", ".join(config_ids[:_NAMED])
    more = len(config_ids) - _NAMED
    return f"{named} and {more} more" if more > 0 else named


def pareto_front(rows: Sequence[ConfigRow], basis: ParetoBasis | None = None) -> list[ConfigRow]:
    """The rows no other dominates on ``basis`` (default: ``pareto_basis(rows)``), fastest first.

    A row dominates another when it is no worse in both figures and better in one;
    rows with equal figures do not dominate each other, so ties are all on the front.
    Rows without both figures are left out.
    """
    basis = pareto_basis(rows) if basis is None else basis
    points = [(r, p) for r in rows if (p := basis.point(r)) is not None]
    front = [(r, p) for r, p in points if not any(_dominates(q, p) for _, q in points)]
    return [r for r, _ in sorted(front, key=lambda rp: (rp[1], rp[0].config_id))]


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether ``a`` is no worse than ``b`` in both (lower is better) and better in one."""
    return a[0] <= b[0] and a[1] <= b[1] and a != b
