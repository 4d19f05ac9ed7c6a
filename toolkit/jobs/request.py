"""A Ray job as it would be submitted, and where its driver runs: printable, pure.

Every workload (``toolkit.workloads``) and ``rtk stall-check`` become a ``JobRequest``;
``--dry-run`` prints it and ``flows.Session.run_request`` runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from toolkit.json_types import JsonObject


class Driver(StrEnum):
    """Where a job's driver runs.

    ``JOB``: submitted to Ray's Jobs API, whose supervisor starts it on the head
    (``rtk jobs``, ``logs`` and ``stop`` reach it). ``LOCAL``: a process started by
    rtk on this machine, which is the head, as Ray's SLURM template runs its program
    (``jobs.local_driver``: no supervisor to start first, so the job starts sooner).
    ``AUTO``: ``LOCAL`` inside a SLURM allocation on the head, else ``JOB``.
    """

    AUTO = "auto"
    JOB = "job"
    LOCAL = "local"


@dataclass(frozen=True)
class JobRequest:
    """A Ray job as it would be submitted: printable, nothing started."""

    kind: str
    entrypoint: str
    runtime_env: Mapping[str, Any]
    submission_id: str
    dashboard_url: str
    run_dir: str | None = None
    driver: Driver = Driver.JOB
    notes: tuple[str, ...] = ()  # lines ``--dry-run`` prints after the request

    def render(self) -> str:
        """The request as text (``--dry-run``)."""
        if self.driver is Driver.LOCAL:
            how = "as a process here, on the head (not through the Jobs API)"
        else:
            how = f"via {self.dashboard_url}"
        lines = [
            f"{self.kind} job {self.submission_id} {how}",
            f"  entrypoint: {self.entrypoint}",
        ]
        for key, value in self.runtime_env.items():
            if isinstance(value, Mapping):
                lines.append(f"  {key}:")
                lines += [f"    {k}={v}" for k, v in value.items()]
            else:
                lines.append(f"  {key}: {value}")
        if self.run_dir:
            lines.append(f"  run directory: {self.run_dir}")
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "kind": self.kind,
            "entrypoint": self.entrypoint,
            "runtime_env": dict(self.runtime_env),
            "submission_id": self.submission_id,
            "dashboard_url": self.dashboard_url,
            "run_dir": self.run_dir,
            "driver": self.driver.value,
        }
