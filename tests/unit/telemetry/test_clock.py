"""Clock offsets from round trips: the median survives slow rounds; start and end combine."""

from __future__ import annotations

import itertools

import pytest

from toolkit.telemetry.clock import ClockOffset, combine, estimate_offset


def test_offset_is_the_median_and_shrugs_off_slow_round_trips() -> None:
    # The head's clock ticks 1 ms per reading; the node is 5 s ahead; every fourth
    # round trip the node answers 200 ms late (a GC pause), skewing that round.
    head = itertools.count(start=1000.0, step=0.001)
    rounds = itertools.count()

    def head_wall_s() -> float:
        return next(head)

    def node_wall_s() -> float:
        late = 0.2 if next(rounds) % 4 == 3 else 0.0
        for _ in range(int(late / 0.001)):
            next(head)  # the slow answer takes head time too
        return next(head) + 5.0 - 0.0005

    offset = estimate_offset(node_wall_s, rounds=15, head_wall_s=head_wall_s)
    assert offset.offset_s == pytest.approx(5.0, abs=0.001)
    assert offset.uncertainty_s == pytest.approx(0.001, abs=0.0005)
    assert offset.rtt_min_s == pytest.approx(0.002, abs=1e-9)
    assert offset.rounds == 15


def test_combine_averages_start_and_end_and_widens_for_drift() -> None:
    start = ClockOffset(offset_s=1.0, uncertainty_s=0.001, rounds=15, rtt_min_s=0.002)
    end = ClockOffset(offset_s=1.2, uncertainty_s=0.002, rounds=15, rtt_min_s=0.002)
    both = combine(start, end)
    assert both.offset_s == pytest.approx(1.1)
    assert both.uncertainty_s == pytest.approx(0.002 + 0.1)
    assert both.to_json()["start"] == start.to_json() and both.to_json()["end"] == end.to_json()
    assert both.to_json()["start"]["offset_s"] == 1.0 and both.measured
    only_start = combine(start, None)
    assert only_start.offset_s == 1.0 and only_start.to_json()["end"] is None
    nothing = combine(None, None)
    assert nothing.to_json() == {"offset_s": 0.0, "uncertainty_s": None, "start": None, "end": None}
    assert not nothing.measured


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rounds"):
        estimate_offset(lambda: 0.0, rounds=0)
