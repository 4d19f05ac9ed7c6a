"""The optimize controller against a model of GPUs (``gpu_model``): it profiles the common
grid top down and keeps the limit the model says is best, noise and all."""

from __future__ import annotations

import math
import random

import pytest
from unit.power.gpu_model import H100, GpuModel, RunModel, cluster, drive

from toolkit.power.optimize import (
    SETTLED_STEPS,
    OptimizeController,
    OptimizeSettings,
    limit_grid_w,
)
from toolkit.power.windows import GpuKey, GpuRange, Window

STRAGGLER = GpuKey("node1", 2)
SEEDS = range(6)


def two_nodes(noise: float = 0.02) -> RunModel:
    """8 GPUs on 2 nodes, one doing 10% more work than the others."""
    return cluster(2, 4, slower={STRAGGLER: 1.1}, noise=noise)


def best_grid_w(run: RunModel, grid_w: tuple[float, ...], settings: OptimizeSettings) -> float:
    """The best limit of the grid by the noiseless model (brute force)."""
    steps = {limit_w: run.common_step(limit_w) for limit_w in grid_w}
    if settings.eta is None:
        bound_s = (1 + settings.max_slowdown) * min(s.step_s for s in steps.values())
        within = [w for w, s in steps.items() if s.step_s <= bound_s]
        return min(within, key=lambda w: steps[w].total_energy_j)
    eta = settings.eta
    max_power_w = sum(r.max_w for r in run.ranges.values())

    def cost(limit_w: float) -> float:
        step = steps[limit_w]
        return eta * step.total_energy_j + (1 - eta) * max_power_w * step.step_s

    return min(grid_w, key=cost)


def test_the_grid_goes_from_the_top_down_to_the_bottom_in_steps() -> None:
    assert limit_grid_w({GpuKey("n", 0): H100}, 25.0) == tuple(700.0 - 25 * i for i in range(21))
    # The bottom is included even off the step; the top of all GPUs, the bottom of all.
    ranges = {GpuKey("n", 0): H100, GpuKey("n", 1): GpuRange(90.0, 400.0, 400.0)}
    grid = limit_grid_w(ranges, 100.0)
    assert grid == (700.0, 600.0, 500.0, 400.0, 300.0, 200.0, 100.0, 90.0)


def test_the_model_has_an_energy_minimum_inside_the_range() -> None:
    run = two_nodes()
    energy = {w: run.common_step(w).total_energy_j for w in range(200, 701)}
    lowest_w = min(energy, key=energy.__getitem__)
    assert 300 < lowest_w < 600
    assert run.common_step(lowest_w).step_s > run.common_step(700).step_s


@pytest.mark.parametrize(
    "settings",
    [
        OptimizeSettings(),
        OptimizeSettings(max_slowdown=0.10),
        OptimizeSettings(max_slowdown=0.15),
        OptimizeSettings(max_slowdown=0.5),
        OptimizeSettings(eta=0.8),
        OptimizeSettings(eta=0.9),
    ],
    ids=["slowdown5%", "slowdown10%", "slowdown15%", "slowdown50%", "eta0.8", "eta0.9"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_it_finds_the_best_limit_within_one_grid_step(
    settings: OptimizeSettings, seed: int
) -> None:
    run = two_nodes()
    controller = OptimizeController(run.ranges, settings)
    best_w = best_grid_w(run, controller.grid_w, settings)
    assert best_w < 700.0  # a choice to get right, not the top
    drive(controller, run, seed)
    assert controller.chosen_w is not None
    assert abs(controller.chosen_w - best_w) <= settings.grid_step_w


def test_the_choice_is_kept_for_the_rest_of_the_run() -> None:
    run = two_nodes()
    controller = OptimizeController(run.ranges, OptimizeSettings(max_slowdown=0.15))
    driven = drive(controller, run, seed=1, after_settled=5)
    first = next(i for i, d in enumerate(driven.decisions) if d.settled)
    chosen_w = controller.chosen_w
    assert chosen_w is not None
    profiled = len(controller.profile)
    for decision in driven.decisions[first:]:
        assert decision.settled
        assert decision.steps == SETTLED_STEPS
        assert dict(decision.limits_w) == {k: chosen_w for k in run.ranges}
    assert not any(d.settled for d in driven.decisions[:first])
    # Later windows are watched, not acted on.
    assert controller.chosen_w == chosen_w
    assert len(controller.profile) == profiled
    assert driven.decisions[first + 1].reason.startswith(f"keeping {chosen_w:.0f} W (chosen): ")


def test_the_warm_up_runs_at_the_default_limits_and_is_the_baseline() -> None:
    ranges = {GpuKey("n", 0): GpuRange(200.0, 700.0, 650.0)}
    run = RunModel({GpuKey("n", 0): GpuModel()}, ranges)
    controller = OptimizeController(ranges, OptimizeSettings(warmup_steps=7))
    start = controller.start()
    assert dict(start.limits_w) == {GpuKey("n", 0): 650.0}
    assert start.steps == 7
    assert not start.settled
    assert controller.baseline is None
    window = run.window(start.limits_w, start.steps, random.Random(0))
    first = controller.observe(window)
    assert controller.baseline is window
    assert dict(first.limits_w) == {GpuKey("n", 0): 700.0}
    assert first.steps == 5


def test_reasons_are_one_line_with_units() -> None:
    run = two_nodes()
    driven = drive(OptimizeController(run.ranges, OptimizeSettings()), run, seed=2)
    reasons = [d.reason for d in driven.decisions]
    assert reasons[0] == "warm-up: every GPU at its default limit for 10 steps"
    assert reasons[1].startswith("profiling 700 W (1 of 21); warm-up at the default limits gave ")
    assert reasons[2].startswith("profiling 675 W (2 of 21); 700 W gave ")
    assert reasons[2].endswith(" J/step") and " s/step, " in reasons[2]
    chose = next(d.reason for d in driven.decisions if d.settled)
    assert chose.startswith("chose ")
    assert "% less energy per step than 700 W, " in chose
    assert "% slower (limit 5%)" in chose
    assert all("\n" not in r and len(r) < 200 for r in reasons)


def test_it_stops_profiling_after_two_limits_over_the_bound() -> None:
    run = two_nodes()
    settings = OptimizeSettings(max_slowdown=0.05)
    controller = OptimizeController(run.ranges, settings)
    driven = drive(controller, run, seed=3)
    profile = controller.profile
    assert 2 < len(profile) < len(controller.grid_w) - 5
    fastest_s = min([p.step_s for p in profile] + [driven.windows[0].step_s])
    bound_s = (1 + settings.max_slowdown) * fastest_s
    assert all(p.step_s > bound_s for p in profile[-2:])
    assert not all(p.step_s > bound_s for p in profile[-3:-1])
    assert "stopped at " in next(d.reason for d in driven.decisions if d.settled)
    # No window ever ran below the last profiled limit.
    lowest_w = profile[-1].limit_w
    assert all(min(d.limits_w.values()) >= lowest_w for d in driven.decisions)


def test_with_eta_it_profiles_the_whole_grid() -> None:
    run = two_nodes()
    controller = OptimizeController(run.ranges, OptimizeSettings(eta=0.9))
    drive(controller, run, seed=3)
    assert [p.limit_w for p in controller.profile] == list(controller.grid_w)
    assert all(p.steps == 5 for p in controller.profile)


@pytest.mark.parametrize("settings", [OptimizeSettings(), OptimizeSettings(eta=0.9)])
def test_replaying_the_recorded_windows_gives_the_same_decisions(
    settings: OptimizeSettings,
) -> None:
    run = two_nodes()
    driven = drive(OptimizeController(run.ranges, settings), run, seed=4)
    again = OptimizeController(run.ranges, settings)
    replayed = [again.start()] + [again.observe(w) for w in driven.windows]
    assert replayed == list(driven.decisions)
    # Halfway through too: a restarted driver replays what it has, then goes on.
    half = len(driven.windows) // 2
    resumed = OptimizeController(run.ranges, settings)
    resumed.start()
    for window in driven.windows[:half]:
        resumed.observe(window)
    assert resumed.observe(driven.windows[half]) == driven.decisions[half + 1]


ONE = GpuKey("n", 0)


def by_hand(
    gpu_range: GpuRange, settings: OptimizeSettings, measured: list[tuple[float, float]]
) -> OptimizeController:
    """A controller of one GPU fed windows of (s/step, J/step), the warm-up's first."""
    controller = OptimizeController({ONE: gpu_range}, settings)
    decision = controller.start()
    for step_s, energy_j in measured:
        window = Window(decision.limits_w, decision.steps, step_s, {ONE: energy_j * 5})
        decision = controller.observe(window)
    assert decision.settled
    return controller


# The grid 700, 600, 500 W: (s/step, J/step) of the warm-up and of each limit.
MEASURED = [(1.0, 400.0), (1.0, 400.0), (1.05, 330.0), (1.3, 300.0)]


@pytest.mark.parametrize(
    ("eta", "chosen_w"), [(0.0, 700.0), (0.2, 700.0), (0.5, 600.0), (1.0, 500.0)]
)
def test_with_eta_it_minimises_zeus_cost(eta: float, chosen_w: float) -> None:
    # Cost: eta * J/step + (1 - eta) * 700 W * s/step; at eta 0.2: 640, 654, 788.
    settings = OptimizeSettings(eta=eta, grid_step_w=100.0, steps_per_limit=5)
    controller = by_hand(GpuRange(500.0, 700.0, 700.0), settings, MEASURED)
    assert [p.limit_w for p in controller.profile] == [700.0, 600.0, 500.0]
    assert controller.chosen_w == chosen_w


@pytest.mark.parametrize(("default_w", "chosen_w"), [(700.0, 700.0), (600.0, 600.0)])
def test_the_warm_up_counts_as_the_fastest_only_at_the_top(
    default_w: float, chosen_w: float
) -> None:
    # 600 W is 8% slower than the warm-up and 3.8% slower than the profiled 700 W.
    measured = [(1.0, 400.0), (1.04, 400.0), (1.08, 350.0), (1.2, 300.0)]
    settings = OptimizeSettings(grid_step_w=100.0)
    controller = by_hand(GpuRange(500.0, 700.0, default_w), settings, measured)
    assert controller.chosen_w == chosen_w


def test_a_single_gpu() -> None:
    run = cluster(1, 1)
    settings = OptimizeSettings(max_slowdown=0.15)
    controller = OptimizeController(run.ranges, settings)
    drive(controller, run, seed=0)
    assert controller.chosen_w is not None
    assert abs(controller.chosen_w - best_grid_w(run, controller.grid_w, settings)) <= 25.0


def test_gpus_with_different_ranges_each_stay_in_their_own() -> None:
    a100 = GpuRange(min_w=100.0, max_w=400.0, default_w=400.0)
    small = GpuModel(work_s=0.3, saturation_w=350.0, knee_w=250.0, floor_w=60.0, idle_w=50.0)
    gpus = {GpuKey("h", i): GpuModel() for i in range(2)}
    gpus.update({GpuKey("a", i): small for i in range(2)})
    ranges = {k: (H100 if k.node == "h" else a100) for k in gpus}
    run = RunModel(gpus, ranges)
    settings = OptimizeSettings(eta=0.9)
    controller = OptimizeController(ranges, settings)
    assert controller.grid_w[0] == 700.0 and controller.grid_w[-1] == 100.0
    driven = drive(controller, run, seed=5)
    for decision in driven.decisions:
        for key, limit_w in decision.limits_w.items():
            assert ranges[key].min_w <= limit_w <= ranges[key].max_w
    chosen_w = controller.chosen_w
    assert chosen_w is not None
    assert abs(chosen_w - best_grid_w(run, controller.grid_w, settings)) <= 25.0
    last = driven.decisions[-1].limits_w
    assert last == {k: r.clamp(chosen_w) for k, r in ranges.items()}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_slowdown", -0.01),
        ("max_slowdown", 1.5),
        ("max_slowdown", math.nan),
        ("eta", 1.01),
        ("eta", -0.5),
        ("warmup_steps", 0),
        ("warmup_steps", 2.5),
        ("steps_per_limit", 0),
        ("steps_per_limit", True),
        ("grid_step_w", 0.0),
        ("grid_step_w", -25.0),
    ],
)
def test_bad_settings_name_the_field_and_the_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"{field}={value!r} is out of range; allowed: "):
        OptimizeSettings(**{field: value})  # type: ignore[arg-type]


def test_a_controller_needs_gpus_and_sane_ranges() -> None:
    with pytest.raises(ValueError, match="no GPUs"):
        OptimizeController({}, OptimizeSettings())
    with pytest.raises(ValueError, match="n/gpu0"):
        OptimizeController({GpuKey("n", 0): GpuRange(300.0, 700.0, 800.0)}, OptimizeSettings())
