"""units.py: numbers with units for people, ranges in one unit."""

from __future__ import annotations

from toolkit.telemetry.report.units import joules, value_range, watts


def test_numbers_read_with_one_unit() -> None:
    assert (joules(812.0), joules(1_234_567.0), watts(5410.0)) == ("812 J", "1.23 MJ", "5.41 kW")
    assert value_range("J", [1.23e6, 1.27e6, None]) == "1.23-1.27 MJ"
    assert (
        value_range("W", [5400.0, 5600.0, 5500.0], median=True) == "5.40-5.60 kW (median 5.50 kW)"
    )
    assert value_range("W", [420.0, 420.04]) == "420 W"
    assert value_range("J", [900.0, 1.5e6]) == "0.00-1.50 MJ"  # one unit: the largest's
    assert value_range("W", [None, float("nan")]) == "-"
