"""The stall benchmark's synthetic evidence (benchmarks/stall_diagnosis.py) says what it should.

benchmarks/ is not a package: its folder goes on ``sys.path``, as it does for
``python benchmarks/stall_diagnosis.py``.
"""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

from toolkit.stall.detector import Stall
from toolkit.stall.diagnosis import diagnose

sys.path.append(str(REPO / "benchmarks"))
import stall_diagnosis as bench  # noqa: E402


def test_the_synthetic_evidence_has_the_suspects_it_is_built_with() -> None:
    nodes, expected = bench.evidence(64, frames=30)
    assert len(nodes) == 8 and len(expected) == 64
    assert all(len(rank.frames) == 30 for node in nodes for rank in node.ranks)
    diagnosis = diagnose(nodes, Stall(812, 95.0, 60.0), expected)
    assert [(s.node, s.rank) for s in diagnosis.suspects] == [
        ("node00001", 9),
        ("node00007", None),
        ("node00000", 5),
    ]
    assert diagnosis.groups["wait in all_reduce at train.py:70"] == 54
    assert diagnosis.groups["in next(dataloader) at train.py:88"] == 1


def test_the_benchmark_runs_at_a_small_size(capsys: pytest.CaptureFixture[str]) -> None:
    bench.bench_diagnosis([16], frames=12, repeats=1)
    bench.bench_detector(calls=100, repeats=1, ranks=4, steps_per_s=10.0)
    out = capsys.readouterr().out
    assert "     16 " in out and "budget 0.5%" in out
