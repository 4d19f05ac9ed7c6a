"""power.jsonl: written a line at a time, read back whole, a cut last line skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.power.records import PowerRecorder, gpu_key, gpu_text, read_power
from toolkit.power.windows import Decision, GpuKey, GpuRange, Window

A, B = GpuKey("node-1", 0), GpuKey("node-1", 1)
RANGES = {A: GpuRange(200.0, 700.0, 700.0), B: GpuRange(200.0, 700.0, 700.0)}


def test_gpu_names_go_through_text_and_back() -> None:
    assert gpu_key(gpu_text(GpuKey("n/gpu2x", 7))) == GpuKey("n/gpu2x", 7)
    for bad in ("node", "node/gpu", "/gpu1", "node/gpux"):
        with pytest.raises(ValueError, match="node/gpuN"):
            gpu_key(bad)


def test_a_log_reads_back_what_was_recorded(tmp_path: Path) -> None:
    path = tmp_path / "power.jsonl"
    recorder = PowerRecorder(path)
    recorder.start(1.0, "optimize", {"policy": "optimize"}, RANGES)
    first = Decision({A: 700.0, B: 700.0}, "warm-up", 10)
    recorder.decision(2.0, first, per_gpu=True)
    window = Window({A: 700.0, B: 700.0}, 10, 0.5, {A: 3000.0, B: 2000.0}, {A: 0.1})
    recorder.window(3.0, 11, window, per_gpu=True)
    recorder.window(4.0, 21, window, per_gpu=False)
    recorder.decision(4.0, Decision({A: 450.0, B: 450.0}, "chose 450 W", 100, True), True)
    recorder.note(5.0, "power limits put back on 1 node(s)")
    with path.open("a") as f:
        f.write('{"kind": "window", "wall_s": 6.0, "fi')  # a crash mid-line
    log = read_power(path)
    assert log is not None and log.policy == "optimize" and dict(log.gpus) == RANGES
    assert [w.first_step for w in log.windows] == [11, 21]
    assert log.windows[0].window == window
    assert log.windows[0].energy_per_step_j == 500.0 and log.windows[0].mean_limit_w == 700.0
    assert log.windows[1].window.energy_j == {} and log.windows[1].energy_per_step_j == 500.0
    assert [d.reason for d in log.decisions] == ["warm-up", "chose 450 W"]
    assert log.decisions[1].settled and log.decisions[1].limits_w == {A: 450.0, B: 450.0}
    assert log.notes == ("power limits put back on 1 node(s)",)


def test_a_start_on_other_gpus_drops_the_windows_before(tmp_path: Path) -> None:
    path = tmp_path / "power.jsonl"
    recorder = PowerRecorder(path)
    recorder.start(1.0, "optimize", {}, RANGES)
    recorder.window(2.0, 1, Window({A: 700.0}, 5, 0.5, {A: 10.0}), per_gpu=True)
    recorder.start(3.0, "optimize", {}, RANGES)  # a restarted driver, the same GPUs
    log = read_power(path)
    assert log is not None and len(log.windows) == 1
    recorder.start(4.0, "optimize", {}, {A: RANGES[A]})  # a node fewer
    log = read_power(path)
    assert log is not None and log.windows == () and list(log.gpus) == [A]


def test_no_file_or_no_start_is_none(tmp_path: Path) -> None:
    assert read_power(tmp_path / "absent.jsonl") is None
    (tmp_path / "notes.jsonl").write_text('{"kind": "note", "wall_s": 1, "text": "x"}\n')
    assert read_power(tmp_path / "notes.jsonl") is None
