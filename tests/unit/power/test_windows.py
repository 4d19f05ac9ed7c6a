"""The controllers' vocabulary: GPU names, ranges, a window's energy per step."""

from __future__ import annotations

from toolkit.power.windows import GpuKey, GpuRange, Window


def test_gpu_names_sort_by_node_then_index_and_print_as_node_slash_gpu() -> None:
    keys = [GpuKey("n2", 0), GpuKey("n1", 3), GpuKey("n1", 1)]
    assert sorted(keys) == [GpuKey("n1", 1), GpuKey("n1", 3), GpuKey("n2", 0)]
    assert str(GpuKey("node07", 3)) == "node07/gpu3"


def test_a_range_clamps_a_limit_into_itself() -> None:
    h100 = GpuRange(min_w=200.0, max_w=700.0, default_w=700.0)
    assert [h100.clamp(w) for w in (100.0, 450.0, 900.0)] == [200.0, 450.0, 700.0]


def test_a_windows_energy_per_step_sums_its_gpus() -> None:
    a, b = GpuKey("n", 0), GpuKey("n", 1)
    window = Window({a: 500.0, b: 500.0}, steps=4, step_s=0.5, energy_j={a: 800.0, b: 400.0})
    assert window.energy_per_step_j == 300.0
    assert Window({}, steps=0, step_s=0.0, energy_j={}).energy_per_step_j == 0.0
