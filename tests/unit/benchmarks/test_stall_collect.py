"""The stall collection benchmark (benchmarks/stall_collect.py) runs at a small size, and cleans up.

benchmarks/ is not a package: its folder goes on ``sys.path``, as it does for
``python benchmarks/stall_collect.py``. Ray is not started here (its parts run in the
benchmark itself); the rank processes, ``node_evidence`` and the finding are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO

from toolkit.stall.slow import find_slow_rank

sys.path.append(str(REPO / "benchmarks"))
import stall_collect as bench  # noqa: E402


def test_the_ranks_are_read_and_every_one_is_gone_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with bench.rank_processes(3, run_dir, fake_nodes=2) as pids:
        assert len(set(pids)) == 3
        assert all(Path(f"/proc/{pid}").exists() for pid in pids)
        assert sorted(p.name for p in (run_dir / "markers").iterdir()) == [
            f"rank-{rank:05d}.jsonl" for rank in range(3)
        ]
        bench.bench_node_evidence(run_dir, 3, repeats=1, stack_timeout_s=30.0)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    out = capsys.readouterr().out
    assert "node_evidence, py-spy" in out and "node_evidence, faulthandler only" in out
    assert out.count("3 ranks: ") == 2 and "faulthandler 3" in out


def test_a_rank_that_does_not_start_is_an_error_and_the_others_are_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "RANK_SCRIPT", "print('not ready', flush=True)\n")
    with (
        pytest.raises(RuntimeError, match="did not start"),
        bench.rank_processes(2, tmp_path / "run", fake_nodes=1),
    ):
        pass


def test_the_synthetic_answers_name_their_slow_rank(capsys: pytest.CaptureFixture[str]) -> None:
    found = find_slow_rank([bench.synthetic_node(n) for n in range(6)])
    assert found is not None and (found.rank, found.node, found.last) == (29, "node00003", 50)
    bench.bench_find([4], repeats=1)
    assert "     4 nodes: " in capsys.readouterr().out
