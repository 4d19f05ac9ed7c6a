"""Numbers with units for people: ``1.23 MJ``, ``5.41 kW``, ranges in one unit."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def joules(value: float) -> str:
    """Energy with a unit that keeps it short: ``812 J``, ``1.23 MJ``."""
    return _si(value, "J")


def watts(value: float) -> str:
    """Power with a unit that keeps it short: ``420 W``, ``5.41 kW``."""
    return _si(value, "W")


def _si(value: float, unit: str, scale_of: float | None = None) -> str:
    scale, prefix = _prefix(abs(scale_of if scale_of is not None else value))
    return f"{_digits(value / scale, abs(scale_of or value) / scale)} {prefix}{unit}"


def _prefix(value: float) -> tuple[float, str]:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return scale, prefix
    return 1.0, ""


def _digits(value: float, magnitude: float) -> str:
    """Three significant digits of ``magnitude``'s size."""
    decimals = max(0, 2 - math.floor(math.log10(magnitude))) if magnitude > 0 else 1
    return f"{value:.{decimals}f}"


def value_range(unit: str, values: Sequence[float | None], median: bool = False) -> str:
    """``lo-hi unit`` in one unit (the largest value's), or one value when all agree.

    ``unit`` is ``J`` or ``W`` (shown with k, M, G prefixes); ``-`` when nothing is known.
    """
    known = [v for v in values if v is not None and math.isfinite(v)]
    if not known:
        return "-"
    lo, hi = min(known), max(known)
    top = max(abs(lo), abs(hi))
    low_text, high_text = _si(lo, unit, top), _si(hi, unit, top)
    if low_text == high_text:
        return high_text
    text = f"{low_text.split()[0]}-{high_text}"
    if median:
        text += f" (median {_si(statistics.median(known), unit, top)})"
    return text
