"""What each step of a flow gives back: typed results the CLI renders, never prints."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import PreflightError, RtkError
from toolkit.jobs.client import JobOutcome
from toolkit.jobs.request import JobRequest
from toolkit.lifecycle.start import NodeOutcome, UpResult
from toolkit.preflight.result import PreflightReport


class PreflightPolicy(enum.Enum):
    """What a failed preflight check does to the flow.

    ``ENFORCE`` raises ``PreflightFailedError`` (the flow stops); ``RECORD`` keeps going
    and keeps the report (in the run directory where there is one); ``SKIP`` runs no
    check at all.
    """

    ENFORCE = "enforce"
    RECORD = "record"
    SKIP = "skip"


@dataclass(frozen=True)
class PreflightOutcome:
    """The checks a flow ran (``report`` is None when the policy skipped them)."""

    policy: PreflightPolicy
    report: PreflightReport | None = None
    saved_to: str | None = None

    @property
    def failed(self) -> bool:
        """True when a check failed."""
        return self.report is not None and self.report.exit_code != 0


@dataclass(frozen=True)
class BringUpOutcome:
    """Ray started (``up``) and the checks after it (``preflight``)."""

    up: UpResult
    preflight: PreflightOutcome

    @property
    def left_out(self) -> list[NodeOutcome]:
        """Nodes that failed to start but the cluster went on without (``min_nodes``)."""
        return [n for n in self.up.nodes if n.action == "failed"]


class PreflightFailedError(PreflightError):
    """A check failed under ``PreflightPolicy.ENFORCE``; the outcome so far comes with it."""

    def __init__(
        self, message: str, preflight: PreflightOutcome, bring_up: BringUpOutcome | None = None
    ) -> None:
        super().__init__(message)
        self.preflight = preflight
        self.bring_up = bring_up


@dataclass(frozen=True)
class WorkloadOutcome:
    """The job that ran a workload, and how it ended."""

    request: JobRequest
    job: JobOutcome

    @property
    def ok(self) -> bool:
        """True when the job succeeded."""
        return self.job.ok


@dataclass(frozen=True)
class CollectOutcome:
    """Where a run's results are on this machine after ``collect``.

    Attributes:
        run_dir: The run directory as asked for (``~`` expanded).
        path: Where its results are here; None when they are not.
        copied: The files brought from the head, or None when nothing was fetched.
        error: Why fetching them failed.
        writable: False when neither the run's path nor ./RUN_ID could be written here.
    """

    run_dir: Path
    path: Path | None
    copied: list[str] | None = None
    error: RtkError | None = None
    writable: bool = True


@dataclass(frozen=True)
class ReportOutcome:
    """The report built from a run's results (or why it could not be)."""

    run_dir: Path
    summary: str | None = None
    html: Path | None = None
    error: RtkError | None = None
