"""The ranks' files from their nodes to the head: what a node sends, what the head keeps.

Each node's view of the run directory is a real folder here (one per node, as
without a shared filesystem; one for all, as with one). The Ray task that carries a
node's answer only calls ``rank_files_longer`` there: the integration test
``test_train_cluster.py`` runs it on the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.rundir import RunDir
from toolkit.telemetry.rank_files import keep_longer, rank_file_sizes, rank_files_longer


def write_lines(path: Path, lines: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def steps(n: int) -> list[dict[str, object]]:
    return [{"step": i, "loss": 1.0 / i} for i in range(1, n + 1)]


def gather(head: Path, *nodes: Path) -> list[str]:
    """What the driver does, node by node, with the head's sizes taken once before."""
    have = rank_file_sizes(head)
    written: list[str] = []
    for node in nodes:
        written += keep_longer(head, rank_files_longer(node, have))
    return written


def test_rank_0s_metrics_and_markers_come_from_the_worker_it_ran_on(tmp_path: Path) -> None:
    head, worker, other = (RunDir(tmp_path / n) for n in ("head", "worker", "other"))
    write_lines(head.marker(2), [{"event": "run_start", "rank": 2}])
    write_lines(head.train_config, [{"written": "by the driver"}])  # not a rank file
    write_lines(worker.marker(0), [{"event": "run_start", "rank": 0}])
    write_lines(worker.metrics, steps(30))
    write_lines(other.marker(1), [{"event": "run_start", "rank": 1}])
    written = gather(head.root, worker.root, other.root)
    assert sorted(written) == [
        "markers/rank-00000.jsonl",
        "markers/rank-00001.jsonl",
        "metrics.jsonl",
    ]
    got = [json.loads(x)["step"] for x in head.metrics.read_text().splitlines()]
    assert got == list(range(1, 31))
    assert [p.name for p in head.marker_files()] == [
        "rank-00000.jsonl",
        "rank-00001.jsonl",
        "rank-00002.jsonl",
    ]
    assert head.marker(0).read_bytes() == worker.marker(0).read_bytes()


def test_a_shared_filesystem_sends_nothing_back(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "shared")
    write_lines(run.marker(0), [{"event": "run_start", "rank": 0}])
    write_lines(run.metrics, steps(5))
    assert rank_files_longer(run.root, rank_file_sizes(run.root)) == {}
    assert gather(run.root, run.root, run.root) == []


def test_the_longer_copy_wins_and_a_shorter_one_never_cuts_the_heads(tmp_path: Path) -> None:
    head, stale, fresh = (RunDir(tmp_path / n) for n in ("head", "stale", "fresh"))
    write_lines(head.metrics, steps(10))
    write_lines(stale.metrics, steps(4))  # an earlier attempt's rank 0, say
    write_lines(fresh.metrics, steps(20))
    assert rank_files_longer(stale.root, rank_file_sizes(head.root)) == {}
    assert gather(head.root, stale.root, fresh.root) == ["metrics.jsonl"]
    assert head.metrics.read_bytes() == fresh.metrics.read_bytes()
    # Two nodes with the same file longer than the head's: the longest is kept.
    assert keep_longer(head.root, {"metrics.jsonl": b"short\n"}) == []
    assert head.metrics.read_bytes() == fresh.metrics.read_bytes()


def test_superseded_steps_come_back_too(tmp_path: Path) -> None:
    head, worker = RunDir(tmp_path / "head"), RunDir(tmp_path / "worker")
    head.root.mkdir()
    write_lines(worker.superseded_metrics, steps(3))
    assert gather(head.root, worker.root) == ["metrics.superseded.jsonl"]
    assert head.superseded_metrics.read_bytes() == worker.superseded_metrics.read_bytes()
