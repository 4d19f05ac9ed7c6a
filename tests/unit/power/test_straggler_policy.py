"""The stragglers controller against a model of GPUs (``gpu_model``): the GPUs that wait
for a slower one are lowered until they stop waiting, the slowest is left alone, and a
step more than ``max_slowdown`` slower is undone after one window."""

from __future__ import annotations

import math
import random
import re
from dataclasses import replace

import pytest
from unit.power.gpu_model import H100, Drive, RunModel, cluster, drive

from toolkit.power.optimize import SETTLED_STEPS
from toolkit.power.straggler_policy import StragglerController, StragglerSettings
from toolkit.power.windows import Decision, GpuKey, GpuRange, Window

STRAGGLER = GpuKey("node1", 2)
SEEDS = range(4)


def two_nodes(factor: float = 1.25, noise: float = 0.02, gpu_range: GpuRange = H100) -> RunModel:
    """8 GPUs on 2 nodes; ``STRAGGLER`` does ``factor`` times the others' work."""
    return cluster(2, 4, slower={STRAGGLER: factor}, noise=noise, gpu_range=gpu_range)


def at_defaults(run: RunModel) -> dict[GpuKey, float]:
    return {key: r.default_w for key, r in run.ranges.items()}


def lowerings(driven: Drive) -> list[tuple[int, GpuKey]]:
    """(window, GPU): each GPU lowered in answer to each window."""
    found = []
    for i in range(len(driven.windows)):
        before, after = driven.decisions[i].limits_w, driven.decisions[i + 1].limits_w
        found += [(i, key) for key in before if after[key] < before[key]]
    return found


@pytest.mark.parametrize("seed", SEEDS)
def test_the_waiting_gpus_are_lowered_and_the_slowest_keeps_its_default(seed: int) -> None:
    run = two_nodes()
    settings = StragglerSettings()
    driven = drive(StragglerController(run.ranges, settings), run, seed)
    lowered = lowerings(driven)
    assert {key for _, key in lowered} == set(run.gpus) - {STRAGGLER}
    for i, key in lowered:
        window = driven.windows[i]
        assert window.wait_s[key] >= settings.min_wait_share * window.step_s
    assert all(d.limits_w[STRAGGLER] == 700.0 for d in driven.decisions)
    # By the model: less energy per step, and a step within the bound.
    final = driven.decisions[-1].limits_w
    start = run.step(at_defaults(run))
    assert run.step(final).total_energy_j < 0.85 * start.total_energy_j
    assert run.step(final).step_s <= (1 + settings.max_slowdown) * start.step_s
    # And as measured.
    assert driven.windows[-1].energy_per_step_j < 0.85 * driven.windows[1].energy_per_step_j


@pytest.mark.parametrize("seed", SEEDS)
def test_a_step_over_the_bound_is_undone_after_one_window(seed: int) -> None:
    run = two_nodes()
    settings = StragglerSettings(max_slowdown=0.03, grid_step_w=50.0)
    controller = StragglerController(run.ranges, settings)
    driven = drive(controller, run, seed, after_settled=4)
    assert controller.baseline is driven.windows[1]
    bound_s = (1 + settings.max_slowdown) * driven.windows[1].step_s
    over = [i for i, w in enumerate(driven.windows) if w.step_s > bound_s]
    assert over, "the last lowering should overshoot the bound"
    for i in over:
        raised = driven.decisions[i + 1]
        assert raised.reason.startswith("step ") and " back to " in raised.reason
        # Back to the limits before the last lowering ...
        assert raised.limits_w == driven.decisions[i - 1].limits_w
        assert raised.limits_w != driven.decisions[i].limits_w
        # ... and never lowered again: no later window is over the bound.
        assert all(w.step_s <= bound_s for w in driven.windows[i + 1 :])
        assert all(d.limits_w == raised.limits_w for d in driven.decisions[i + 1 :])
    assert len(over) == 1
    final = driven.decisions[-1].limits_w
    default_s = run.step(at_defaults(run)).step_s
    assert run.step(final).step_s <= (1 + settings.max_slowdown) * default_s
    assert final[STRAGGLER] == 700.0
    assert min(final.values()) < 700.0


def test_no_slower_gpu_nothing_is_lowered() -> None:
    run = two_nodes(factor=1.0)
    driven = drive(StragglerController(run.ranges, StragglerSettings()), run, seed=0)
    assert all(d.limits_w == at_defaults(run) for d in driven.decisions)
    assert driven.decisions[2].settled
    assert driven.decisions[2].reason.startswith("no GPU waits 5% of a step now; ")


def test_no_gpu_goes_below_its_least_limit() -> None:
    run = two_nodes(gpu_range=GpuRange(min_w=460.0, max_w=700.0, default_w=700.0))
    driven = drive(StragglerController(run.ranges, StragglerSettings()), run, seed=0)
    final = driven.decisions[-1].limits_w
    assert final == {k: (700.0 if k == STRAGGLER else 460.0) for k in run.gpus}
    assert all(min(d.limits_w.values()) >= 460.0 for d in driven.decisions)


def test_the_gpus_that_wait_least_are_never_lowered_even_when_all_wait() -> None:
    keys = [GpuKey("n", i) for i in range(4)]
    controller = StragglerController({k: H100 for k in keys}, StragglerSettings())
    decisions = [controller.start()]
    # Every GPU waits over 5% of the step (a wait the slowest rank has too); n/gpu0 and
    # n/gpu1 least, then n/gpu1 alone.
    waits = [(0.1, 0.1, 0.3, 0.3), (0.1, 0.1, 0.3, 0.3), (0.2, 0.1, 0.25, 0.3)]
    for wait in waits:
        limits_w = decisions[-1].limits_w
        window = Window(
            limits_w, 10, 1.0, {k: 4000.0 for k in keys}, dict(zip(keys, wait, strict=True))
        )
        decisions.append(controller.observe(window))
    assert [d.limits_w[keys[0]] for d in decisions] == [700.0] * 4
    assert [d.limits_w[keys[1]] for d in decisions] == [700.0] * 4
    assert [d.limits_w[keys[2]] for d in decisions] == [700.0, 700.0, 675.0, 650.0]
    assert "n/gpu0, n/gpu1 keep 700 W (the slowest)" in decisions[2].reason


def test_once_settled_it_keeps_the_limits() -> None:
    run = two_nodes()
    driven = drive(StragglerController(run.ranges, StragglerSettings()), run, 1, after_settled=4)
    first = next(i for i, d in enumerate(driven.decisions) if d.settled)
    for decision in driven.decisions[first:]:
        assert decision.settled
        assert decision.steps == SETTLED_STEPS
        assert decision.limits_w == driven.decisions[first].limits_w
    assert driven.decisions[-1].reason.startswith("keeping the limits: 7 GPUs at ")
    assert all(d.steps == 10 for d in driven.decisions[1:first])


def test_the_reasons_count_and_name_the_gpus() -> None:
    run = two_nodes(noise=0.0)
    settings = StragglerSettings(max_slowdown=0.03, grid_step_w=50.0)
    driven = drive(StragglerController(run.ranges, settings), run, 0)
    reasons = [d.reason for d in driven.decisions]
    assert reasons[0] == "warm-up: every GPU at its default limit for 10 steps"
    assert reasons[1] == "warm-up done; measuring the step at the default limits"
    assert re.fullmatch(
        r"lowered 7 waiting GPUs to 650 W \(they waited 18% of each step\); "
        r"node1/gpu2 keeps 700 W \(the slowest\)",
        reasons[2],
    )
    raised = next(r for r in reasons if "raised" in r)
    assert re.fullmatch(
        r"step \d+\.\d% slower than at the start: raised node0/gpu0, node0/gpu1, node0/gpu2 "
        r"and 4 more back to 400 W and keep them there",
        raised,
    )


@pytest.mark.parametrize("settings", [StragglerSettings(), StragglerSettings(grid_step_w=50.0)])
def test_replaying_the_recorded_windows_gives_the_same_decisions(
    settings: StragglerSettings,
) -> None:
    run = two_nodes()
    driven = drive(StragglerController(run.ranges, settings), run, seed=2)
    again = StragglerController(run.ranges, settings)
    replayed = [again.start()] + [again.observe(w) for w in driven.windows]
    assert replayed == list(driven.decisions)


def test_a_gpu_without_a_measured_wait_is_left_alone() -> None:
    run = two_nodes()
    unmeasured = GpuKey("node0", 1)
    controller = StragglerController(run.ranges, StragglerSettings())
    rng = random.Random(0)
    decision = controller.start()
    decisions: list[Decision] = [decision]
    while not decision.settled:
        window = run.window(decision.limits_w, decision.steps, rng)
        waits = {k: s for k, s in window.wait_s.items() if k != unmeasured}
        decision = controller.observe(replace(window, wait_s=waits))
        decisions.append(decision)
    assert all(d.limits_w[unmeasured] == 700.0 for d in decisions)
    assert decisions[-1].limits_w[GpuKey("node0", 0)] < 600.0


def test_a_thousand_gpus_get_short_reasons() -> None:
    straggler = GpuKey("node7", 3)
    run = cluster(125, 8, slower={straggler: 1.25})
    assert len(run.gpus) == 1000
    driven = drive(StragglerController(run.ranges, StragglerSettings()), run, seed=0)
    for decision in driven.decisions:
        assert len(decision.reason) < 200 and "\n" not in decision.reason, decision.reason
    final = driven.decisions[-1].limits_w
    assert final[straggler] == 700.0
    assert sum(limit_w < 500.0 for limit_w in final.values()) == 999
    assert "lowered 999 waiting GPUs to 675 W" in driven.decisions[2].reason


def test_a_thousand_gpus_raised_back_get_a_short_reason() -> None:
    run = cluster(125, 8, slower={GpuKey("node7", 3): 1.25}, noise=0.0)
    settings = StragglerSettings(max_slowdown=0.03, grid_step_w=50.0)
    driven = drive(StragglerController(run.ranges, settings), run, seed=0)
    raised = next(d.reason for d in driven.decisions if "raised" in d.reason)
    assert "node0/gpu0, node0/gpu1, node0/gpu2 and 996 more back to 400 W" in raised
    assert len(raised) < 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_slowdown", -0.1),
        ("max_slowdown", math.inf),
        ("warmup_steps", 0),
        ("steps_per_window", -1),
        ("steps_per_window", 1.5),
        ("grid_step_w", 0.5),
        ("min_wait_share", 1.5),
        ("min_wait_share", math.nan),
    ],
)
def test_bad_settings_name_the_field_and_the_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"{field}={value!r} is out of range; allowed: "):
        StragglerSettings(**{field: value})  # type: ignore[arg-type]


def test_a_controller_needs_gpus() -> None:
    with pytest.raises(ValueError, match="no GPUs"):
        StragglerController({}, StragglerSettings())


def test_a_window_with_no_waits_lowers_nothing() -> None:
    run = two_nodes()
    controller = StragglerController(run.ranges, StragglerSettings())
    decision = controller.start()
    for _ in range(3):
        window = run.window(decision.limits_w, decision.steps, random.Random(0))
        decision = controller.observe(replace(window, wait_s={}))
    assert decision.limits_w == at_defaults(run)
    assert decision.settled
