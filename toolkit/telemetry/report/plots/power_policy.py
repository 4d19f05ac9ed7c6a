"""power_policy.png: what the run's power policy tried and kept (only with ``power.jsonl``).

Left, the curve: each window's energy per step against the GPUs' mean limit in it (the
profile's points; the first steps at the default limits and the kept limits marked).
Right, the run: each window's mean limit and time per step, in order.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from toolkit.power.policy_summary import PowerSummary


def draw_power_policy(power: PowerSummary, figure: Figure) -> None:
    """power_policy.png's two panels."""
    curve, run = figure.subplots(1, 2)
    points = power.points
    trying = [p for p in points if not p.settled]
    kept = [p for p in points if p.settled]
    curve.plot(
        [p.mean_limit_w for p in trying], [p.energy_per_step_j for p in trying],
        "o", color="tab:blue", label="windows while choosing",
    )  # fmt: skip
    if kept:
        curve.plot(
            [p.mean_limit_w for p in kept], [p.energy_per_step_j for p in kept],
            "s", color="tab:green", label="kept",
        )  # fmt: skip
    if power.baseline is not None:
        base = power.baseline
        curve.plot([base.mean_limit_w], [base.energy_per_step_j], "D", color="black",
                   label="first steps (default limits)")  # fmt: skip
    curve.set_xlabel("GPUs' mean power limit (W)")
    curve.set_ylabel("energy per step, every GPU (J)")
    saved = power.energy_saved
    curve.set_title(
        f"{power.policy}: " + (f"{saved:.1%} less energy per step" if saved is not None
                               else "no limit kept yet")
    )  # fmt: skip
    curve.legend()
    steps = [p.first_step for p in points]
    run.step(steps, [p.mean_limit_w for p in points], where="post", color="tab:orange")
    run.set_xlabel("step")
    run.set_ylabel("mean power limit (W)", color="tab:orange")
    times = run.twinx()
    times.plot(steps, [p.step_s for p in points], ".-", color="tab:purple")
    times.set_ylabel("time per step (s)", color="tab:purple")
    run.set_title(f"{len(points)} window(s) on {power.gpus} GPU(s)")
