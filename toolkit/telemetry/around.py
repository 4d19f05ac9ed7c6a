"""The telemetry around a run, as a job driver's runtime starts and ends it.

``RunTelemetry`` is ``toolkit.jobdriver.runtime.Beside`` for the telemetry: before the
run, every node's sampler starts and the idle baseline is measured; after it (and
after the GPU limits went back), the cooldown, ``idle.json``, the ranks' files the
head does not hold gathered from their nodes, and the samplers stopped with their
traces collected. Without telemetry (``rtk train --no-telemetry``) the ranks' files
are still gathered: rank 0's metrics and the markers may lie on other nodes, and rtk
fetches the run from the head alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toolkit.telemetry.cluster_session import TelemetrySession
from toolkit.telemetry.rank_files import gather_rank_files
from toolkit.telemetry.settle import IdlePhases


class RunTelemetry:
    """Samplers, baseline, cooldown and the ranks' files around one run.

    Args:
        run_dir: The run directory, as the head sees it.
        session: The samplers (None: no telemetry; the ranks' files are gathered).
        idle: The baseline and cooldown (with a session only).
        cooldown_after_failure: Cool down after a run that exited non-zero too (a
            recorded command's status is its own; a training run that failed or
            stopped early has no cooldown, time being short then).
        gather: Brings the ranks' files to the head (tests pass their own).
    """

    def __init__(
        self,
        run_dir: str | Path,
        session: TelemetrySession | None,
        idle: IdlePhases | None = None,
        cooldown_after_failure: bool = False,
        gather: Callable[[str, Mapping[str, Any] | None], object] = gather_rank_files,
    ) -> None:
        self.run_dir = run_dir
        self.session, self.idle = session, idle
        self.cooldown_after_failure = cooldown_after_failure
        self._gather = gather

    def begin(self) -> None:
        """Start every node's sampler, then measure the idle baseline."""
        if self.session is not None:
            self.session.start()
        if self.idle is not None:
            self.idle.before()

    def end(self, code: int | None) -> None:
        """Cool down after a run that ended, then the rest whatever happens.

        The cooldown comes after a run that succeeded (or ended at all, with
        ``cooldown_after_failure``); then ``idle.json`` is saved, the ranks' files are
        gathered and the samplers stopped.
        """
        try:
            cools = code is not None and (code == 0 or self.cooldown_after_failure)
            if self.idle is not None and cools:
                self.idle.after()
        finally:
            if self.idle is not None:
                self.idle.save()
            self._gather(
                str(self.run_dir), self.session.helpers() if self.session is not None else None
            )
            if self.session is not None:
                self.session.stop()
