"""Where the seconds of ``rtk train`` go, seen from the machine that runs it.

Stamped on this machine's clock from what it sees: its own steps (preflight, the
report) and the job's log as it streams in (the driver's first line, the first step
trained). Log lines arrive within one poll of the log tail (``jobs.logtail``), so
the job's phases are known to about that.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from toolkit.json_types import JsonObject
from toolkit.lifecycle.up_timings import PhaseSpan, render_phases

DRIVER_PREFIX = "rtk train: "
# The trainer's step line (``toolkit.train.loop``), as rank 0 prints it: the first one
# in the log is the first step trained (a resumed run's too).
STEP_LINE = re.compile(r"\bstep \d+/\d+ loss ")


@dataclass(frozen=True)
class TrainTimings:
    """The phases of one ``rtk train``; a phase that did not happen is None.

    Attributes:
        preflight: The fast checks.
        job_start: Submitting the job until its driver's first line (the job's
            environment set up, Ray's driver process started).
        first_step: The driver's first line until the first step's line (telemetry
            samplers, Ray Train's workers, the process group, the model, one step).
        training: The first step's line until the job ended.
        report: Collecting the results and building the report.
        total_s: The whole command.
        bring_up: Ray started on every node (``rtk train --up``), the driver meanwhile.
    """

    preflight: PhaseSpan | None
    job_start: PhaseSpan | None
    first_step: PhaseSpan | None
    training: PhaseSpan | None
    report: PhaseSpan | None
    total_s: float
    bring_up: PhaseSpan | None = None

    def rows(self) -> list[tuple[str, PhaseSpan | None]]:
        """The phases in order, with their labels (bring-up only when there was one)."""
        return [
            *([("bring up", self.bring_up)] if self.bring_up is not None else []),
            ("preflight", self.preflight),
            ("job start", self.job_start),
            ("to first step", self.first_step),
            ("training", self.training),
            ("report", self.report),
        ]

    def to_json(self) -> JsonObject:
        """The phases as a JSON object, each span rounded to milliseconds."""
        data: JsonObject = {
            label.replace(" ", "_"): span.to_json() if span else None for label, span in self.rows()
        }
        data.setdefault("bring_up", None)
        first = self.first_step
        data["time_to_first_step_s"] = round(first.end_s, 3) if first else None
        data["total_s"] = round(self.total_s, 3)
        return data

    def render(self) -> str:
        """A few aligned lines (``rtk train --timings``)."""
        return render_phases([(label, span, "") for label, span in self.rows()], self.total_s)


class TrainClock:
    """Stamps the phases of one ``rtk train`` as they happen; thread-safe."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        """Phases count from now."""
        self._now = now
        self._origin = now()
        self._lock = threading.Lock()
        self._stamps: dict[str, float] = {}
        self._spans: dict[str, PhaseSpan] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (up, preflight, job, report)."""
        began = self._now() - self._origin
        try:
            yield
        finally:
            ended = self._now() - self._origin
            with self._lock:
                self._spans[name] = PhaseSpan(began, ended, 1)

    def see(self, line: str) -> None:
        """A line of the job's log: the driver's first, or the first step's."""
        at = self._now() - self._origin
        with self._lock:
            if line.startswith(DRIVER_PREFIX):
                self._stamps.setdefault("driver", at)
            elif STEP_LINE.search(line):
                self._stamps.setdefault("step", at)

    def timings(self) -> TrainTimings:
        """The phases so far."""
        with self._lock:
            job = self._spans.get("job")
            driver = self._stamps.get("driver")
            step = self._stamps.get("step")
            job_start = first_step = training = None
            if job is not None:
                end_s = job.end_s
                job_start = PhaseSpan(job.start_s, driver if driver is not None else end_s, 1)
                if driver is not None and step is not None:
                    first_step = PhaseSpan(driver, step, 1)
                    training = PhaseSpan(step, end_s, 1)
            return TrainTimings(
                self._spans.get("preflight"),
                job_start,
                first_step,
                training,
                self._spans.get("report"),
                self._now() - self._origin,
                self._spans.get("up"),
            )
