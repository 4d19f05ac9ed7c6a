"""The power policy's thread in a job driver: measure windows of steps, set limits, put back.

A thread of the driver (``rtk train``'s ``train/job.py``, ``rtk torchrun``'s
``torchrun/fanout.py``, ``rtk telemetry record``'s ``record_job.py``), beside the stall
watchdog. It follows the steps in the ranks' marker files the driver can read (as the
watchdog does) and, through ``PowerNodes`` (``toolkit.power.ask``: a pinned task per
node), sets limits and reads every GPU's energy counter. One round:

1. set the decision's limits (only where they change) and read the counters;
2. the step in progress is mixed, so the window starts at the next finished step;
3. once the decision's steps are done, read the counters again (and, for stragglers,
   the ranks' waits): time per step from the markers, each GPU's mean power over the
   reads times that time is its energy per step;
4. the controller (``optimize`` or ``stragglers``, pure) turns the window into the next
   decision; window and decision go to ``power.jsonl`` (``records``) and the decision's
   reason to the log.

A limit a node cannot set (not root, out of range, an NVML error) is one line; every
node is then put back and the run goes on at its default limits. ``stop`` always puts
back what was set (the end, a failure, SIGTERM from Ctrl-C); a driver killed outright
leaves each node's restore file for ``rtk profile --restore`` or the next ``rtk up``.
A driver restarted in the same run directory replays the windows it finds there: the
profile is resumed, not repeated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from toolkit.power.ask import NodeReport, PowerNodes, RayPowerNodes
from toolkit.power.optimize import OptimizeController, OptimizeSettings
from toolkit.power.records import PowerRecorder, read_power
from toolkit.power.settings import OPTIMIZE, STRAGGLERS, PowerSettings
from toolkit.power.straggler_policy import StragglerController, StragglerSettings
from toolkit.power.waits import gpu_of, window_waits
from toolkit.power.windows import Controller, Decision, GpuKey, GpuRange, Window
from toolkit.rundir import RunDir
from toolkit.rundir.markers import MarkerFollower

POLL_S = 0.5
DISCOVER_RETRY_S = 10.0  # before the first step, the nodes' GPUs are asked this often
_SHOWN = 3  # nodes named in a line; the rest are counted
MISSES_MAX = 3  # asks in a row without a node's readings: the policy stops


def make_controller(settings: PowerSettings, gpus: Mapping[GpuKey, GpuRange]) -> Controller:
    """The controller of ``settings.policy`` for ``gpus``.

    Raises:
        ValueError: The policy changes nothing (``measure``).
    """
    if settings.policy == OPTIMIZE:
        return OptimizeController(
            gpus,
            OptimizeSettings(
                max_slowdown=settings.max_slowdown,
                eta=settings.eta,
                warmup_steps=settings.warmup_steps,
                steps_per_limit=settings.steps_per_limit,
                grid_step_w=settings.grid_step_w,
            ),
        )
    if settings.policy == STRAGGLERS:
        return StragglerController(
            gpus,
            StragglerSettings(
                max_slowdown=settings.max_slowdown,
                warmup_steps=settings.warmup_steps,
                steps_per_window=settings.steps_per_window,
                grid_step_w=settings.grid_step_w,
            ),
        )
    raise ValueError(f"--power-policy {settings.policy} sets no limit")


@dataclass(frozen=True)
class _Reads:
    """Every GPU's energy counter (mJ) at one ask, and each node's wall time then."""

    energy_mj: Mapping[GpuKey, int]
    wall_s: Mapping[str, float]


def _names(nodes: list[str]) -> str:
    shown = ", ".join(sorted(nodes)[:_SHOWN])
    more = len(nodes) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


class PowerDriver:
    """Runs one power policy beside a run (see the module's docstring).

    Args:
        run_dir: The run directory, as this node sees it.
        settings: The policy (not ``measure``).
        say: Prints a line in the job's log.
        nodes: The nodes' GPUs (``RayPowerNodes``; tests pass a model).
        clock: The wall clock (``power.jsonl``'s stamps).
        poll_s: How often the markers are read.
    """

    def __init__(
        self,
        run_dir: str,
        settings: PowerSettings,
        say: Callable[[str], None],
        nodes: PowerNodes,
        clock: Callable[[], float] = time.time,
        poll_s: float = POLL_S,
    ) -> None:
        if not settings.acts:
            raise ValueError(f"--power-policy {settings.policy} sets no limit")
        self.run_dir, self.settings = run_dir, settings
        self._say, self._nodes, self._clock, self._poll_s = say, nodes, clock, poll_s
        self.follower = MarkerFollower(run_dir)
        self.recorder = PowerRecorder(RunDir(run_dir).power)
        self.gpus: dict[GpuKey, GpuRange] = {}
        self.controller: Controller | None = None
        self.decision: Decision | None = None
        self.windows = 0
        self.done = False  # nothing more to do (no GPU, or a limit could not be set)
        self._limits: dict[GpuKey, float] = {}  # as last set or read
        self._set_any = False
        self._last_step: int | None = None
        self._last_wall_s = 0.0
        self._anchor: tuple[int, float] | None = None  # the window's first step's start
        self._start: _Reads | None = None
        self._start_step = -1  # the last step finished when the limits were set
        self._next_discover_s = 0.0
        self._misses = 0  # asks in a row that a node of the run did not answer
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the thread --------------------------------------------------------------------

    def start(self) -> PowerDriver:
        """Run in a daemon thread until ``stop``."""
        self._thread = threading.Thread(target=self._run, name="rtk-power", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, then put back every limit that was set (always)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60.0)
        self.restore()

    def __enter__(self) -> PowerDriver:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s) and not self.done:
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - the power policy never ends the run
                self._give_up(f"{type(e).__name__}: {e}")

    # -- one poll ----------------------------------------------------------------------

    def tick(self) -> None:
        """Read the new steps; discover, set, or close a window when it is time."""
        self._read_steps()
        if self.done:
            return
        if self.controller is None:
            self._discover()
            return
        if self._start is None:
            self._apply()
            return
        if self._anchor is None:
            if self._last_step is not None and self._last_step > self._start_step:
                self._anchor = (self._last_step, self._last_wall_s)
            return
        assert self.decision is not None
        first, began_s = self._anchor
        if self._last_step is None or self._last_step < first + self.decision.steps:
            return
        self._close_window(first, began_s)

    def _read_steps(self) -> None:
        for progress in self.follower.poll():
            if progress.event != "step_end" or progress.step is None:
                continue
            if self._last_step is None or progress.step > self._last_step:
                self._last_step, self._last_wall_s = progress.step, progress.wall_s

    def _discover(self) -> None:
        """Find the GPUs once the run has begun; start (or resume) the controller."""
        if self._last_step is None or time.monotonic() < self._next_discover_s:
            return
        self._next_discover_s = time.monotonic() + DISCOVER_RETRY_S
        answers = self._nodes.ask({}, None)
        gpus: dict[GpuKey, GpuRange] = {}
        for name, report in answers.items():
            if isinstance(report, str):
                continue
            for gpu in report.power.gpus:
                values = (gpu.energy_mj, gpu.min_w, gpu.max_w, gpu.default_w, gpu.limit_w)
                if gpu.min_w is None or gpu.max_w is None or gpu.default_w is None:
                    continue
                if None in values or gpu.limit_w is None:
                    continue  # a GPU without a settable limit or an energy counter
                key = GpuKey(name, gpu.index)
                gpus[key] = GpuRange(gpu.min_w, gpu.max_w, gpu.default_w)
                self._limits[key] = gpu.limit_w
        if not gpus:
            self._give_up(
                f"no GPU with an energy counter on any of {len(answers)} node(s); "
                "the run goes on at its limits"
            )
            return
        self.gpus = gpus
        controller = make_controller(self.settings, gpus)
        decision = controller.start()
        log = read_power(RunDir(self.run_dir).power)
        replayed = 0
        if log is not None and dict(log.gpus) == gpus and log.policy == self.settings.policy:
            for record in log.windows:
                if record.window.energy_j:  # a settled window kept totals only
                    decision = controller.observe(record.window)
                    replayed += 1
        self.controller, self.decision = controller, decision
        self.recorder.start(self._clock(), self.settings.policy, self.settings.to_json(), gpus)
        nodes = len({k.node for k in gpus})
        resumed = f", resumed after {replayed} window(s) measured before" if replayed else ""
        self._say(f"{self.settings.policy}: {len(gpus)} GPU(s) on {nodes} node(s){resumed}")
        self.recorder.decision(self._clock(), decision, per_gpu=True)
        self._say(decision.reason)
        self._apply()

    def _apply(self) -> None:
        """Set the decision's limits where they change, and read the counters."""
        assert self.decision is not None
        changes: dict[str, dict[int, float]] = {}
        for key, limit_w in self.decision.limits_w.items():
            if self._limits.get(key) != limit_w:
                changes.setdefault(key.node, {})[key.index] = limit_w
        answers = self._nodes.ask(changes, None)
        self._set_any = self._set_any or bool(changes)
        refused = [
            f"{name}: {error}"
            for name, report in answers.items()
            if not isinstance(report, str)
            for error in report.power.errors
        ]
        silent = [name for name in changes if isinstance(answers.get(name), str)]
        if refused or silent:
            why = refused[0] if refused else f"{_names(silent)} did not answer"
            more = len(refused) + len(silent) - 1
            self._give_up(
                f"a power limit could not be set ({why}"
                + (f"; and {more} more" if more > 0 else "")
                + "): the run goes on at the default limits"
            )
            return
        reads = self._reads(answers)
        if reads is None:
            self._missed(answers)  # set and read again at the next poll
            return
        for key in self.gpus:
            self._limits[key] = self.decision.limits_w.get(key, self._limits.get(key, 0.0))
        self._misses = 0
        self._start, self._anchor = reads, None
        self._start_step = self._last_step if self._last_step is not None else -1

    def _missed(self, answers: Mapping[str, NodeReport | str]) -> None:
        """A node of the run gave no reading: after ``MISSES_MAX`` in a row, stop."""
        self._misses += 1
        if self._misses < MISSES_MAX:
            return
        silent = sorted(
            {key.node for key in self.gpus if not isinstance(answers.get(key.node), NodeReport)}
        )
        why = answers.get(silent[0]) if silent else None
        self._give_up(
            f"{_names(silent) or 'a node'} gave no GPU reading {MISSES_MAX} times in a row"
            + (f" ({why})" if isinstance(why, str) else "")
            + ": the power policy stops, the run goes on at the default limits"
        )

    def _reads(self, answers: Mapping[str, NodeReport | str]) -> _Reads | None:
        energy: dict[GpuKey, int] = {}
        walls: dict[str, float] = {}
        for key in self.gpus:
            report = answers.get(key.node)
            if not isinstance(report, NodeReport):
                return None
            walls[key.node] = report.power.wall_s
            value = next((g.energy_mj for g in report.power.gpus if g.index == key.index), None)
            if value is None:
                return None
            energy[key] = value
        return _Reads(energy, walls)

    def _close_window(self, first: int, began_s: float) -> None:
        """The window's steps are done: read, measure, decide, record."""
        assert self.decision is not None and self.controller is not None
        assert self._start is not None and self._last_step is not None
        stragglers = self.settings.policy == STRAGGLERS
        answers = self._nodes.ask({}, self.run_dir if stragglers else None)
        end = self._reads(answers)
        if end is None:  # a node missed: measure this decision again
            self._start = None
            self._missed(answers)
            return
        self._misses = 0
        last, ended_s = self._last_step, self._last_wall_s
        steps = last - first
        step_s = max(ended_s - began_s, 1e-9) / steps
        energy_j: dict[GpuKey, float] = {}
        for key in self.gpus:
            span_s = end.wall_s[key.node] - self._start.wall_s[key.node]
            joules = (end.energy_mj[key] - self._start.energy_mj[key]) / 1000.0
            power_w = joules / span_s if span_s > 0 else 0.0
            energy_j[key] = power_w * step_s * steps
        waits = self._waits(answers, first + 1, last) if stragglers else {}
        window = Window(dict(self._limits), steps, step_s, energy_j, waits)
        previous = self.decision
        decision = self.controller.observe(window)
        changed = dict(decision.limits_w) != dict(previous.limits_w)
        per_gpu = changed or not previous.settled
        now = self._clock()
        self.recorder.window(now, first + 1, window, per_gpu=per_gpu)
        news = changed or decision.settled != previous.settled  # the choice carries its limits
        self.recorder.decision(now, decision, per_gpu=news or not decision.settled)
        if news:
            self._say(decision.reason)
        self.windows += 1
        self.decision = decision
        self._start, self._anchor = (end, None) if not changed else (None, None)
        self._start_step = last
        if self._start is None:
            self._apply()

    def _waits(
        self, answers: Mapping[str, NodeReport | str], first: int, last: int
    ) -> dict[GpuKey, float]:
        """Each GPU's mean wait per step at the window's collectives (of its ranks)."""
        ranks = [r for a in answers.values() if isinstance(a, NodeReport) for r in a.ranks]
        per_rank = window_waits(ranks, first, last)
        waits: dict[GpuKey, list[float]] = {}
        for name, report in answers.items():
            if not isinstance(report, NodeReport):
                continue
            uuids = {g.index: g.uuid for g in report.power.gpus}
            for who in report.rank_gpus:
                index = gpu_of(who.local_rank, who.gpu_uuid, uuids)
                if index is not None and who.rank in per_rank:
                    waits.setdefault(GpuKey(name, index), []).append(per_rank[who.rank])
        return {key: sum(values) / len(values) for key, values in waits.items()}

    # -- the end -------------------------------------------------------------------------

    def _give_up(self, why: str) -> None:
        """Say why in one line, put back what was set, and do nothing more."""
        self._say(why)
        self.recorder.note(self._clock(), why)
        self.done = True
        self.restore()

    def restore(self) -> None:
        """Put back every limit that was set (nothing when none was)."""
        if not self._set_any:
            return
        self._set_any = False
        done = self._nodes.restore()
        failed = [result.failed for _, result in sorted(done.items()) if result.failed]
        if failed:
            text = (
                f"power limits not put back on {len(failed)} node(s) ({failed[0]});"
                " `rtk profile --restore` or the next `rtk up` puts them back"
            )
        else:
            text = f"power limits put back on {len(done)} node(s)"
        self._say(text)
        self.recorder.note(self._clock(), text)


def power_driver(
    run_dir: str | None, settings: PowerSettings, say: Callable[[str], None]
) -> PowerDriver | None:
    """The run's power driver over Ray's nodes, started (None: ``measure``, or no run dir)."""
    if not settings.acts or not run_dir:
        return None
    return PowerDriver(
        run_dir, settings, lambda line: say(f"power: {line}"), RayPowerNodes(owner=run_dir)
    ).start()
