"""The power driver against a model of a cluster's GPUs (``tests/power_model.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from power_model import COMM_S, MAX_W, MIN_W, ModelNodes, play

from toolkit.gpu.limits import GpuRestore
from toolkit.power.ask import NodeReport
from toolkit.power.driver import PowerDriver
from toolkit.power.policy_summary import summarize
from toolkit.power.records import read_power
from toolkit.power.settings import OPTIMIZE, STRAGGLERS, PowerSettings
from toolkit.power.windows import GpuKey
from toolkit.rundir import RunDir


def settled_at(run_dir: Path) -> int:
    """The index of the first settled decision in the run's ``power.jsonl``."""
    log = read_power(RunDir(run_dir).power)
    assert log is not None
    return next(i for i, d in enumerate(log.decisions) if d.settled)


def test_optimize_profiles_the_grid_keeps_the_best_limit_and_puts_it_back(
    tmp_path: Path,
) -> None:
    model = ModelNodes({"n0": 2, "n1": 2})
    said: list[str] = []
    settings = PowerSettings(policy=OPTIMIZE, grid_step_w=50.0)
    driver = PowerDriver(str(tmp_path), settings, said.append, model)
    play(driver, model, tmp_path, range(400))
    assert driver.decision is not None and driver.decision.settled
    kept = set(driver.decision.limits_w.values())
    # Energy per step falls with the limit down to the saturation point (450 W), then the
    # steps slow by more than 5%: the best limit within the bound is 450 W.
    assert kept == {450.0}, said
    assert set(model.limits_w.values()) == {450.0}
    driver.stop()
    assert model.restored == 1 and set(model.limits_w.values()) == {MAX_W}
    assert said[0] == "optimize: 4 GPU(s) on 2 node(s)"
    assert said[-1] == "power limits put back on 2 node(s)"
    log = read_power(RunDir(tmp_path).power)
    assert log is not None and log.policy == OPTIMIZE and len(log.gpus) == 4
    summary = summarize(log)
    assert summary.kept is not None and summary.kept.mean_limit_w == 450.0
    assert summary.energy_saved is not None and summary.energy_saved > 0.2
    assert summary.slowdown is not None and abs(summary.slowdown) < 0.05
    # Settled windows keep their totals only: the file does not grow by GPUs forever.
    settled = [w for w in log.windows if not w.window.energy_j]
    assert settled and all(w.energy_per_step_j > 0 for w in settled)


def test_a_put_back_that_failed_is_told_from_one_that_was_done_by_its_record(
    tmp_path: Path,
) -> None:
    """Not by its wording: a done line may say "failed" (a GPU named so) and be done."""

    class Failing(ModelNodes):
        def restore(self) -> dict[str, GpuRestore]:
            super().restore()
            return {
                "n0": GpuRestore("n0", done=("n0: put back the power limit of GPU failed-0",)),
                "n1": GpuRestore("n1", failed="n1: could not put back every GPU setting on n1"),
                "n2": GpuRestore("n2", failed="n2: did not answer within 30 s"),
            }

    model = Failing({"n0": 1, "n1": 1, "n2": 1})
    said: list[str] = []
    driver = PowerDriver(str(tmp_path), PowerSettings(policy=OPTIMIZE), said.append, model)
    play(driver, model, tmp_path, range(60))
    driver.stop()
    assert said[-1] == (
        "power limits not put back on 2 node(s) (n1: could not put back every GPU setting on "
        "n1); `rtk profile --restore` or the next `rtk up` puts them back"
    )


def test_a_restarted_driver_resumes_the_profile_from_power_jsonl(tmp_path: Path) -> None:
    settings = PowerSettings(policy=OPTIMIZE, grid_step_w=50.0)
    whole_model = ModelNodes({"n0": 2})
    whole = PowerDriver(str(tmp_path / "whole"), settings, lambda _: None, whole_model)
    play(whole, whole_model, tmp_path / "whole", range(400))
    profile = settled_at(tmp_path / "whole")

    run = tmp_path / "cut"
    model = ModelNodes({"n0": 2})
    first = PowerDriver(str(run), settings, lambda _: None, model)
    play(first, model, run, range(40))  # the warm-up and a few limits
    windows_before = first.windows
    assert windows_before >= 3 and first.decision is not None and not first.decision.settled
    first.stop()
    said: list[str] = []
    second = PowerDriver(str(run), settings, said.append, model)
    play(second, model, run, range(40, 400))
    assert f"resumed after {windows_before} window(s)" in said[0]
    assert second.decision is not None and second.decision.settled
    assert set(second.decision.limits_w.values()) == {450.0}
    # Not repeated: the windows measured before the choice are as many as in one go.
    assert settled_at(run) - 1 == profile  # one decision more: the restarted driver's first


def test_a_limit_that_cannot_be_set_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    model = ModelNodes({"n0": 1})
    model.refuse = "setting the power limit needs root on n0"
    said: list[str] = []
    driver = PowerDriver(str(tmp_path), PowerSettings(policy=OPTIMIZE), said.append, model)
    play(driver, model, tmp_path, range(60))
    refusals = [line for line in said if "could not be set" in line]
    assert len(refusals) == 1 and "needs root on n0" in refusals[0]
    assert "the run goes on at the default limits" in refusals[0]
    assert driver.done and set(model.limits_w.values()) == {MAX_W}
    asked = len(model.asked)
    play(driver, model, tmp_path, range(60, 80))
    assert len(model.asked) == asked  # nothing more is asked


def test_no_gpu_anywhere_is_one_line(tmp_path: Path) -> None:
    model = ModelNodes({})
    said: list[str] = []
    driver = PowerDriver(str(tmp_path), PowerSettings(policy=STRAGGLERS), said.append, model)
    path = RunDir(tmp_path).marker(0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"event": "step_end", "step": 0, "wall_s": 1.0, "rank": 0,
                                "node": "n0"}) + "\n")  # fmt: skip
    driver.tick()
    assert driver.done and len(said) == 1 and said[0].startswith("no GPU with an energy counter")
    driver.stop()
    assert model.restored == 0  # nothing was set: nothing to put back


def test_stragglers_lowers_only_the_gpus_that_wait(tmp_path: Path) -> None:
    slow = ("n1", 1)
    model = ModelNodes({"n0": 2, "n1": 2}, work={slow: 2.0})
    said: list[str] = []
    settings = PowerSettings(policy=STRAGGLERS, grid_step_w=25.0)
    driver = PowerDriver(str(tmp_path), settings, said.append, model)
    first_step_s = model.compute_s(slow) + COMM_S
    play(driver, model, tmp_path, range(600))
    assert model.limits_w[slow] == MAX_W  # the slowest keeps its full limit
    lowered = {key for key, limit in model.limits_w.items() if limit < MAX_W}
    assert lowered == set(model.limits_w) - {slow}
    # They were lowered until their wait shrank, never past the bound.
    last_step_s = max(model.compute_s(k) for k in model.limits_w) + COMM_S
    assert last_step_s <= first_step_s * (1 + settings.max_slowdown) + 1e-9
    log = read_power(RunDir(tmp_path).power)
    assert log is not None
    summary = summarize(log)
    assert summary.energy_saved is not None and summary.energy_saved > 0.05
    driver.stop()
    assert set(model.limits_w.values()) == {MAX_W}


def test_a_node_that_stops_answering_ends_the_policy_in_one_line(tmp_path: Path) -> None:
    class Silent(ModelNodes):
        silent = False

        def ask(
            self, limits_w: Mapping[str, Mapping[int, float]], run_dir: str | None
        ) -> dict[str, NodeReport | str]:
            answers = super().ask(limits_w, run_dir)
            if self.silent:
                answers["n1"] = "did not answer within 20 s"
            return answers

    model = Silent({"n0": 1, "n1": 1})
    said: list[str] = []
    driver = PowerDriver(str(tmp_path), PowerSettings(policy=OPTIMIZE), said.append, model)
    play(driver, model, tmp_path, range(30))
    assert driver.gpus and not driver.done
    model.silent = True
    play(driver, model, tmp_path, range(30, 200))
    assert driver.done
    (line,) = [s for s in said if "gave no GPU reading" in s]
    assert line == (
        "n1 gave no GPU reading 3 times in a row (did not answer within 20 s): the power "
        "policy stops, the run goes on at the default limits"
    )
    assert model.restored == 1


def test_the_choice_carries_its_limits_in_the_file_even_when_they_do_not_change(
    tmp_path: Path,
) -> None:
    """Optimize may choose the limit it profiled last: power.jsonl still names it."""
    model = ModelNodes({"n0": 1})
    # Faster at every lower limit (no saturation): the last limit profiled is the best.
    model.SATURATION_W = 100.0
    settings = PowerSettings(policy=OPTIMIZE, grid_step_w=100.0)
    driver = PowerDriver(str(tmp_path), settings, lambda _: None, model)
    play(driver, model, tmp_path, range(200))
    log = read_power(RunDir(tmp_path).power)
    assert log is not None
    chosen = next(d for d in log.decisions if d.settled)
    assert chosen.limits_w == {GpuKey("n0", 0): MIN_W}
