"""A run, executed from its plan: ``rtk train``, ``demo`` and ``telemetry record``.

``execute`` walks ``RunPlan.steps`` and calls the ``Session`` step for each; what the
caller shows between steps it gets through ``RunEvents`` (the CLI renders, a test
records). ``RunResult.ran`` lists the steps that ran, in order, so a test can hold
them to the printed plan.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from toolkit.cluster.ray_status import ClusterStatus
from toolkit.flows.driver_placement import DriverAhead
from toolkit.flows.outcome import (
    BringUpOutcome,
    CollectOutcome,
    PreflightOutcome,
    PreflightPolicy,
    ReportOutcome,
    WorkloadOutcome,
)
from toolkit.flows.run_plan import RunPlan, Step
from toolkit.flows.session import Session
from toolkit.flows.timings import TrainClock
from toolkit.lifecycle.down import DownResult
from toolkit.workloads import Workload

# Sees every run's plan and result when it ends (``observe_runs``): a test holds the
# steps that ran to the steps the plan printed.
RunObserver = Callable[[RunPlan, "RunResult"], None]
_OBSERVER: ContextVar[RunObserver | None] = ContextVar("rtk_run_observer", default=None)

# Times a block as a named phase (``TrainClock.phase``), or does nothing.
TimedPhase = Callable[[str], contextlib.AbstractContextManager[None]]


class RunEvents:
    """What a run tells its caller after each step; every method does nothing here."""

    def up(self, outcome: BringUpOutcome) -> None:
        """The cluster is up."""

    def status(self, status: ClusterStatus) -> None:
        """Ray's view of the nodes."""

    def preflight(self, outcome: PreflightOutcome) -> None:
        """The checks passed (a failed one under ``ENFORCE`` raises instead)."""

    def smoke(self, ran: dict[str, dict[str, str]]) -> None:
        """A Ray task ran on every node: node -> where it ran."""

    def job_starts(self) -> None:
        """The job is about to be submitted (or its driver let through)."""

    def job(self, outcome: WorkloadOutcome) -> None:
        """The job ended."""

    def collected(self, outcome: CollectOutcome) -> None:
        """The run's results are here, or why not."""

    def reported(self, outcome: ReportOutcome) -> None:
        """The report was built, or why not."""

    def down(self, result: DownResult) -> None:
        """The cluster was taken down."""


@dataclass
class RunResult:
    """What a run did: the steps that ran, in order, and their outcomes."""

    ran: list[Step] = field(default_factory=list)
    preflight: PreflightOutcome | None = None
    job: WorkloadOutcome | None = None
    collected: CollectOutcome | None = None
    reported: ReportOutcome | None = None

    @property
    def ok(self) -> bool:
        """Whether the job ran and succeeded."""
        return self.job is not None and self.job.ok


@contextlib.contextmanager
def observe_runs(observer: RunObserver) -> Iterator[None]:
    """Runs that end inside the block (in this thread) are shown to ``observer``."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def execute(
    session: Session,
    plan: RunPlan,
    workload: Workload,
    events: RunEvents | None = None,
    clock: TrainClock | None = None,
) -> RunResult:
    """Run ``plan`` (built by ``Session.run_plan`` for ``workload``) step by step.

    Raises:
        PreflightFailedError: A check failed under ``ENFORCE``; nothing after it ran
            but the teardown, when planned.
        KeyboardInterrupt: The job was stopped (after collecting and reporting, when
            ``plan.collect_after_interrupt``).
        RtkError: A step failed; the teardown still runs when planned.
    """
    events = events or RunEvents()
    result = RunResult()
    steps = plan.steps
    phase: TimedPhase = clock.phase if clock is not None else _no_phase
    ahead: DriverAhead | None = None

    def did(step: Step) -> None:
        result.ran.append(step)

    try:
        request = plan.job
        if plan.driver_ahead:
            ahead = session.driver_ahead(workload, request.driver, request)
        try:
            if Step.UP in steps:
                with phase("up"):
                    brought = session.bring_up(
                        PreflightPolicy.SKIP, head_ready=ahead.start if ahead else None
                    )
                did(Step.UP)
                events.up(brought)
                # The bring-up has just learnt whether every node imports this rtk: if
                # so, the job carries none (the one part of the job it can change).
                request = dataclasses.replace(
                    session.job_request(workload, request.driver),
                    submission_id=request.submission_id,
                )
            if Step.STATUS in steps:
                status = session.status()
                did(Step.STATUS)
                events.status(status)
            if plan.preflight is not PreflightPolicy.SKIP:
                with phase("preflight"):
                    checked = session.preflight(
                        plan.run_dir or ".", plan.preflight, save=plan.preflight_file is not None
                    )
                did(Step.PREFLIGHT)
                result.preflight = checked
                events.preflight(checked)
            else:
                did(Step.PREFLIGHT)
            if Step.SMOKE in steps:
                ran = session.smoke()
                did(Step.SMOKE)
                events.smoke(ran)
        except BaseException:
            if ahead is not None:
                ahead.cancel()
            raise
        events.job_starts()
        try:
            with phase("job"):
                result.job = session.run_workload(workload, request.driver, ahead, request)
        except KeyboardInterrupt:
            if plan.collect_after_interrupt:
                _collect_and_report(session, plan, events, result, phase)
            raise
        did(Step.JOB)
        events.job(result.job)
        _collect_and_report(session, plan, events, result, phase)
    finally:
        try:
            if Step.DOWN in steps:
                down = session.tear_down()
                did(Step.DOWN)
                events.down(down)
        finally:
            observer = _OBSERVER.get()
            if observer is not None:
                observer(plan, result)
    return result


def _collect_and_report(
    session: Session,
    plan: RunPlan,
    events: RunEvents,
    result: RunResult,
    phase: TimedPhase,
) -> None:
    if plan.run_dir is None:
        return
    with phase("report"):
        result.collected = session.collect(plan.run_dir, plan.fetch)
        result.ran.append(Step.COLLECT)
        events.collected(result.collected)
        if plan.report:
            result.reported = session.report(result.collected)
            result.ran.append(Step.REPORT)
            events.reported(result.reported)


@contextlib.contextmanager
def _no_phase(name: str) -> Iterator[None]:
    yield
