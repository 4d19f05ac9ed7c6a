"""A run's steps as data: what ``rtk train``, ``launch`` and ``telemetry record`` would do."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.flows.outcome import PreflightPolicy
from toolkit.flows.workload import JobRequest
from toolkit.rundir.preflight import Exclusion


@dataclass(frozen=True)
class RunPlan:
    """Preflight, the job, then collect and report: printable, nothing touched.

    Attributes:
        cluster: The inventory's name.
        head: The head node's name.
        nodes: The cluster's nodes.
        preflight: What a failed check would do (``SKIP``: no checks).
        job: The Ray job that runs the workload.
        report: Whether the run's telemetry is collected and reported after the job.
        excluded: The inventory's nodes ``rtk up`` left out, and why.
        driver_ahead: The job's local driver starts while the cluster comes up
            (``rtk train --up``), held until it is.
    """

    cluster: str
    head: str
    nodes: tuple[str, ...]
    preflight: PreflightPolicy
    job: JobRequest
    report: bool
    excluded: tuple[Exclusion, ...] = ()
    driver_ahead: bool = False

    def render(self) -> str:
        """The plan as text (``--dry-run``)."""
        run_dir = self.job.run_dir
        lines = [f"cluster {self.cluster!r}: {len(self.nodes)} node(s), head {self.head}"]
        lines += [f"   excluded: {e.describe()}" for e in self.excluded]
        if self.preflight is PreflightPolicy.SKIP:
            lines.append("1. preflight: skipped")
        else:
            saved = f", saved as {run_dir}/preflight.json" if run_dir else ""
            lines.append(
                f"1. preflight ({self.preflight.value}): the fast checks on every node{saved}"
            )
        lines.append("2. " + self.job.render().rstrip("\n"))
        if self.driver_ahead:
            lines.append(
                "   its driver starts once the head has its files, imports what it needs "
                "while the nodes join, and waits until the cluster is up (and checked)"
            )
        if self.report and run_dir:
            lines.append(
                f"3. collect: telemetry into {run_dir}/telemetry (from the head when not here)"
            )
            lines.append(f"4. report: {run_dir}/report")
        return "\n".join(lines) + "\n"
