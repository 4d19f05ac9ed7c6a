"""The scale benchmark's synthetic runs (benchmarks/synthetic_run.py) and its harness.

benchmarks/ is not a package: its folder goes on ``sys.path``, as it does for
``python benchmarks/report_scale.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest
from conftest import REPO

from toolkit.rundir import Manifest, Marker, RunDir, read_markers, read_metrics
from toolkit.rundir.trace_files import LEGACY_SAMPLES, node_trace_files
from toolkit.rundir.traces import COMPACT_ROWS, read_table

# Appended, not prepended: nothing of the tests' own is shadowed by a benchmark module.
sys.path.append(str(REPO / "benchmarks"))
import report_scale  # noqa: E402
import synthetic_run as synth  # noqa: E402
from synthetic.samples import SLOW_REASONS, SM_CLOCK_MHZ  # noqa: E402

ALL_FAULTS = list(synth.FAULTS)


def _spec(**overrides: Any) -> Any:
    values: dict[str, Any] = {
        "nodes": 3,
        "gpus": 2,
        "seconds": 20.0,
        "rate_hz": 10.0,
        "power_rate_hz": 50.0,
        "step_s": 0.5,
        "barrier_every": 4,
        "seed": 3,
    }
    values.update(overrides)
    faults = synth.Faults.named(
        values.pop("fault_names", ALL_FAULTS), values["nodes"], values["gpus"]
    )
    return synth.SynthSpec(**values, faults=faults)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("synthetic")
    spec = _spec()
    return {fmt: synth.generate(root / fmt, spec, fmt) for fmt in synth.FORMATS}


def _table(run: Any, node: str) -> pa.Table:
    return read_table(node_trace_files(RunDir(run.run_dir).nodes_dir / node))


def _device(table: pa.Table, device: str, kind: str | None = None) -> pa.Table:
    mask = pc.equal(table["device"], device)
    if kind is not None:
        mask = pc.and_(mask, pc.equal(table["kind"], kind))
    return table.filter(mask)


def _np(table: pa.Table, column: str) -> np.ndarray:
    return table[column].to_numpy(zero_copy_only=False).astype(float)


def _by_rank(run: Any) -> dict[int, list[dict[str, Any]]]:
    ranks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in read_markers(run.run_dir):
        ranks[record.rank].append(record.to_json())
    return ranks


def test_the_arrow_and_the_jsonl_run_hold_the_same_samples(runs: dict[str, Any]) -> None:
    arrow, jsonl = runs["arrow"], runs["jsonl"]
    for node_a, node_j in zip(arrow.nodes, jsonl.nodes, strict=True):
        node_dir = RunDir(arrow.run_dir).nodes_dir / node_a.name
        assert [p.name for p in node_trace_files(node_dir)] == ["trace-001.arrows"]
        assert node_j.trace.name == LEGACY_SAMPLES
        a, j = _table(arrow, node_a.name), _table(jsonl, node_j.name)
        assert a.num_rows == j.num_rows == node_a.samples > 0
        assert a.equals(j), node_a.name
        assert set(pc.unique(a["kind"]).to_pylist()) == {"host", "gpu", "gpu_power"}


def test_arrow_traces_come_in_batches_of_at_most_compact_rows(tmp_path: Path) -> None:
    spec = _spec(nodes=1, gpus=8, seconds=200.0, fault_names=[])
    run = synth.generate(tmp_path / "run", spec, "arrow")
    with pa.memory_map(str(run.nodes[0].trace)) as source:
        sizes = [batch.num_rows for batch in ipc.open_stream(source)]
    assert len(sizes) >= 2 and max(sizes) <= COMPACT_ROWS
    assert sum(sizes) == run.samples
    assert sizes[0] >= COMPACT_ROWS * 0.9  # large batches, as collection compacts them


def test_the_manifest_markers_and_metrics_read_with_the_run_directory_records(
    runs: dict[str, Any],
) -> None:
    run = runs["arrow"]
    spec, plan = run.spec, run.plan
    manifest = Manifest.read(RunDir(run.run_dir).manifest)
    assert manifest.notes == []
    assert manifest.head == "node001" and list(manifest.nodes) == ["node001", "node002", "node003"]
    assert (manifest.rate_hz, manifest.power_rate_hz) == (10.0, 50.0)
    for truth in run.nodes:
        entry = manifest.nodes[truth.name]
        table = _table(run, truth.name)
        assert set(entry.devices) == set(pc.unique(table["device"]).to_pylist())
        assert entry.samples_expected == table.num_rows
        assert entry.last_wall_s == pc.max(table["wall_s"]).as_py()

    ranks = _by_rank(run)
    assert sorted(ranks) == list(range(spec.nodes * spec.gpus))
    barriers = int(plan.barrier.sum())
    assert barriers >= 3
    for rank, records in ranks.items():
        for record in records:
            Marker.from_json(record, f"rank {rank}")  # every record is a valid marker
        events = [r["event"] for r in records]
        assert events[0] == "run_start" and events[-1] == "run_end"
        assert events.count("step_begin") == events.count("step_end") == plan.steps
        assert events.count("barrier") == events.count(synth.BARRIER_ENTER) == barriers
        walls = [r["wall_s"] for r in records]
        assert walls == sorted(walls)
        assert {r["gpu_uuid"] for r in records} == {spec.gpu_uuid(*divmod(rank, spec.gpus))}
    tokens = sum(r["tokens"] for rs in ranks.values() for r in rs if r["event"] == "step_end")
    metrics = list(read_metrics(RunDir(run.run_dir).metrics))
    assert [m.step for m in metrics] == list(range(1, plan.steps + 1))
    assert tokens == sum(m.tokens for m in metrics) == plan.steps * spec.tokens_per_step


def test_a_lost_sampler_stops_early_and_is_marked_lost(runs: dict[str, Any]) -> None:
    run = runs["arrow"]
    lost = run.spec.node_name(run.spec.faults.lost_node)
    manifest = Manifest.read(RunDir(run.run_dir).manifest)
    ends = {}
    for name, entry in manifest.nodes.items():
        ends[name] = pc.max(_table(run, name)["wall_s"]).as_py() - entry.offset_s
        assert entry.status == ("lost" if name == lost else "complete")
    others = max(end for name, end in ends.items() if name != lost)
    missing_s = (1 - run.spec.faults.lost_at_fraction) * run.spec.seconds
    assert others - ends[lost] == pytest.approx(missing_s, abs=0.6)
    assert manifest.nodes[lost].error and "died" in manifest.nodes[lost].error


def test_a_skewed_clock_is_in_the_manifest_and_in_every_wall_time(runs: dict[str, Any]) -> None:
    run = runs["arrow"]
    spec = run.spec
    skewed = spec.node_name(spec.faults.skewed_node)
    manifest = Manifest.read(RunDir(run.run_dir).manifest)
    assert manifest.nodes[skewed].offset_s == spec.faults.skew_s
    assert all(abs(n.offset_s) < 0.05 for name, n in manifest.nodes.items() if name != skewed)
    # Every rank leaves a barrier at once: raw wall times differ by the skew, and
    # agree within a few ms once the manifest's offsets are taken off.
    exits: dict[int, list[tuple[str, float]]] = defaultdict(list)
    for records in _by_rank(run).values():
        for r in records:
            if r["event"] == "barrier":
                exits[r["step"]].append((r["node"], r["wall_s"]))
    for step, times in exits.items():
        raw = [w for node, w in times if node == skewed]
        head = [w for node, w in times if node == "node001"]
        assert min(raw) - max(head) == pytest.approx(spec.faults.skew_s, abs=0.01), step
        aligned = [w - manifest.nodes[node].offset_s for node, w in times]
        assert max(aligned) - min(aligned) < 0.005, step
    # The samples too: the skewed node's wall clock runs skew_s ahead of the head's.
    firsts = {n.name: n.first_wall_s for n in run.nodes}
    assert firsts[skewed] - firsts["node001"] == pytest.approx(spec.faults.skew_s, abs=0.6)


def test_the_straggler_enters_every_barrier_late_and_the_others_wait(runs: dict[str, Any]) -> None:
    run = runs["arrow"]
    spec = run.spec
    straggler, late_s = spec.faults.straggler_rank, spec.faults.straggle_s
    enter: dict[int, dict[int, float]] = defaultdict(dict)
    wait: dict[int, dict[int, float]] = defaultdict(dict)
    for rank, records in _by_rank(run).items():
        for r in records:
            if r["event"] == synth.BARRIER_ENTER:
                enter[r["step"]][rank] = r["mono_s"] - spec.mono_base_s(rank // spec.gpus)
            elif r["event"] == "barrier":
                wait[r["step"]][rank] = r["wait_s"]
    assert len(enter) == int(run.plan.barrier.sum())
    for step in enter:
        others = [t for rank, t in enter[step].items() if rank != straggler]
        assert enter[step][straggler] - max(others) == pytest.approx(late_s, abs=0.002)
        assert wait[step][straggler] < 0.01
        assert min(w for rank, w in wait[step].items() if rank != straggler) > late_s
    # Its GPU sleeps meanwhile: less power than the GPUs waiting in the barrier.
    node, local = divmod(straggler, spec.gpus)
    table = _table(run, spec.node_name(node))
    t = _np(table, "mono_s") - spec.mono_base_s(node)
    inside = np.zeros(table.num_rows, dtype=bool)
    for end in run.plan.end_s[run.plan.barrier]:
        inside |= (t > end + 0.02) & (t < end + late_s - 0.02)
    power = _np(table, "power_w")
    device = table["device"].to_numpy(zero_copy_only=False)
    mine = power[inside & (device == spec.gpu_uuid(node, local))]
    neighbour = power[inside & (device == spec.gpu_uuid(node, 1 - local))]
    assert mine.size >= 10 and neighbour.size >= 10
    assert mine.mean() < 0.6 * neighbour.mean()


def test_the_slow_gpu_draws_more_runs_slower_and_hotter_and_throttles(runs: dict[str, Any]) -> None:
    run = runs["arrow"]
    spec = run.spec
    slow_node, slow_gpu = spec.faults.slow_gpu
    energy, sm_max, temp_max, reasons = {}, {}, {}, {}
    for index, truth in enumerate(run.nodes):
        table = _table(run, truth.name)
        for g in range(spec.gpus):
            uuid = spec.gpu_uuid(index, g)
            full = _device(table, uuid, "gpu")
            counter = _np(full, "energy_j")
            energy[uuid] = counter[-1] - counter[0]
            sm_max[uuid] = _np(full, "sm_clock_mhz").max()
            temp_max[uuid] = _np(full, "temperature_c").max()
            reasons[uuid] = np.bitwise_or.reduce(_np(full, "clocks_event_reasons").astype(int))
    slow = spec.gpu_uuid(slow_node, slow_gpu)
    # The slow GPU's neighbour on its node sampled the same span.
    neighbour = spec.gpu_uuid(slow_node, 1 - slow_gpu)
    assert energy[slow] > 1.08 * energy[neighbour]
    assert sm_max[slow] < sm_max[neighbour] == SM_CLOCK_MHZ.max()
    assert temp_max[slow] > np.median([t for u, t in temp_max.items() if u != slow]) + 5
    assert reasons[slow] & SLOW_REASONS == SLOW_REASONS
    assert all(r & ~0x1 == 0 for u, r in reasons.items() if u != slow)


def test_energy_counters_match_the_generators_truth_and_the_power_samples(
    runs: dict[str, Any],
) -> None:
    run = runs["jsonl"]  # the same samples as the arrow run (checked above)
    spec = run.spec
    dt = 1.0 / spec.tick_hz
    total_truth = total_counter = 0.0
    for index, truth in enumerate(run.nodes):
        table = _table(run, truth.name)
        for g in range(spec.gpus):
            samples = _device(table, spec.gpu_uuid(index, g))
            kinds = samples["kind"].to_numpy(zero_copy_only=False)
            counter = _np(samples, "energy_j")[kinds == "gpu"]
            delta = counter[-1] - counter[0]
            assert delta == pytest.approx(truth.gpu_energy_j[g], abs=0.01)
            # Every tick's power is sampled: the counter integrates exactly those.
            full_at = np.flatnonzero(kinds == "gpu")
            power = _np(samples, "power_w")[full_at[0] : full_at[-1]]
            assert power.sum() * dt == pytest.approx(delta, rel=1e-9, abs=0.01)
            total_truth += truth.gpu_energy_j[g]
            total_counter += delta
        host = _device(table, "host")
        host_j = _np(host, "energy_j")
        assert host_j[-1] - host_j[0] == pytest.approx(truth.host_energy_j, rel=1e-9)
    # And about what the phases say: GPUs between 72 W idle and 610 W computing.
    gpu_hours = sum(n.sampled_s for n in run.nodes) * spec.gpus
    assert 72 * gpu_hours < total_counter < 610 * gpu_hours
    assert total_counter == pytest.approx(total_truth, abs=0.01 * spec.nodes * spec.gpus)


def test_the_command_line_writes_a_run_and_refuses_an_unknown_fault(tmp_path: Path) -> None:
    script = str(REPO / "benchmarks" / "synthetic_run.py")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, script, str(tmp_path / "run"), "--nodes", "2", "--gpus", "2"]
    argv += ["--seconds", "20", "--step-s", "0.5", "--faults", "straggler,lost-sampler"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 nodes x 2 GPUs x 20 s" in done.stdout
    manifest = Manifest.read(RunDir(tmp_path / "run").manifest)
    assert [n.status for n in manifest.nodes.values()] == ["complete", "lost"]
    bad = [*argv[:2], str(tmp_path / "other"), "--faults", "slow-disk"]
    done = subprocess.run(bad, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown fault(s) ['slow-disk']" in done.stderr
    assert not (tmp_path / "other").exists()


def test_the_harness_measures_a_toolkit_checkout_on_a_run_in_a_child(tmp_path: Path) -> None:
    """``git archive`` of this checkout's HEAD, run on a JSON-lines run: the real report."""
    root = report_scale.baseline_root("HEAD", tmp_path)
    assert (root / "toolkit" / "cli" / "cmd_report.py").is_file()
    impl = report_scale.Implementation("old", root, "jsonl")
    report_scale.check_import(impl)
    run = synth.generate(tmp_path / "run", _spec(nodes=2, fault_names=["straggler"]), "jsonl")
    measured = report_scale.measure_report(impl, run.run_dir, timeout_s=120)
    assert measured.ok, measured.error
    assert measured.wall_s > 0 and 20 * 2**20 < measured.peak_rss_bytes < 4 * 2**30
    assert RunDir(run.run_dir).report_summary.is_file()
    missing = report_scale.measure_report(impl, tmp_path / "nothing", timeout_s=120)
    assert not missing.ok and missing.returncode == 1 and "nothing" in missing.error
    table = report_scale.format_table(
        [
            {
                "size": "2x2x20s",
                "samples": run.samples,
                "jsonl_mb_per_node_hour": 50.0,
                "arrow_mb_per_node_hour": 5.0,
                "old": vars(measured),
                "new": vars(missing),
            }
        ]
    )
    assert "failed" in table and "2x2x20s new: " in table
