"""What ``rtk stall-check`` prints: its job's lines, its record, or why it could not check.

The job (``toolkit.stall.check_job``) prints its lines after ``CHECK_PREFIX`` and, when
asked, the record after ``CHECK_RECORD_PREFIX``; everything else in its log (Ray's
own lines, library warnings) is not shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from toolkit.errors import JobError, RtkError
from toolkit.stall.records import StallRecord
from toolkit.stall.settings import CHECK_PREFIX, CHECK_RECORD_PREFIX, CHECK_REFUSED

if TYPE_CHECKING:
    from toolkit.jobs.client import JobOutcome


class CheckLog:
    """The stall-check job's log, fed as it streams: its lines shown, its record kept.

    Args:
        echo: Shows one of the job's lines as it comes; a line saying why it could
            not check is kept for the error instead (``failure``).
    """

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.lines: list[str] = []
        self._echo = echo
        self._record: str | None = None

    def feed(self, text: str) -> None:
        """Show and keep the job's own lines of ``text`` (one line or several)."""
        for line in text.splitlines():
            if line.startswith(CHECK_PREFIX):
                said = line[len(CHECK_PREFIX) :]
                self.lines.append(said)
                if not said.startswith(CHECK_REFUSED):
                    self._echo(said)
            elif line.startswith(CHECK_RECORD_PREFIX):
                self._record = line[len(CHECK_RECORD_PREFIX) :]

    def record(self, job_id: str) -> StallRecord:
        """The record the job printed.

        Raises:
            JobError: It printed none, or one that is not a stall record.
        """
        if self._record is None:
            raise JobError(f"the stall-check job {job_id} printed no record")
        try:
            return StallRecord.from_json(json.loads(self._record), "the check's record")
        except (ValueError, RtkError) as e:
            raise JobError(f"the stall-check job {job_id} printed a broken record: {e}") from e

    def failure(self, outcome: JobOutcome, words: str = "") -> str:
        """Why the check did not run, in one line: the job's own word, else Ray's.

        ``words``: how the user named the cluster (``inv.yaml ``, ``--local ``), for
        the ``rtk logs`` the line suggests.
        """
        refused = [line for line in self.lines if line.startswith(CHECK_REFUSED)]
        if refused:
            return refused[-1]
        message = " ".join(outcome.message.split())
        return (
            f"the stall-check job {outcome.job_id} ended {outcome.status}"
            + (f": {message}" if message else "")
            + f"; rtk logs {words}{outcome.job_id} shows its log"
        )
