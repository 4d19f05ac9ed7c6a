"""A run's steps as data: what ``rtk train``, ``demo`` and ``telemetry record`` will do.

The plan is what runs: ``--dry-run`` prints ``RunPlan.render()`` and a run hands the
same object to ``toolkit.flows.run.execute``, which walks ``RunPlan.steps`` in order,
so the printed steps and the executed ones cannot drift apart (TorchX's
``schedule(dryrun(...))``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from toolkit.flows.outcome import PreflightPolicy
from toolkit.jobs.request import JobRequest
from toolkit.rundir.preflight import Exclusion


class Step(enum.Enum):
    """One step of a run, in the order they can occur."""

    UP = "up"
    STATUS = "status"
    PREFLIGHT = "preflight"
    SMOKE = "smoke"
    JOB = "job"
    COLLECT = "collect"
    REPORT = "report"
    DOWN = "down"


@dataclass(frozen=True)
class RunPlan:
    """Bring-up, checks, the job, collect and report, teardown: printable, nothing touched.

    Attributes:
        cluster: The inventory's name.
        head: The head node's name.
        nodes: The cluster's nodes.
        preflight: What a failed check would do (``SKIP``: no checks).
        job: The Ray job that runs the workload.
        report: Whether the run's telemetry is reported after the job.
        excluded: The inventory's nodes ``rtk up`` left out, and why.
        driver_ahead: The job's local driver starts while the cluster comes up
            (``rtk train --up``), held until it is.
        bring_up: The cluster is brought up first (no checks of its own: ``preflight``
            says what runs after it).
        status: Ray's view of the nodes is shown after the bring-up.
        save_preflight: The checks' report is kept in the run directory.
        smoke: A Ray task runs on every node before the job.
        fetch: Results the head holds are copied here when this machine does not see
            them (False: only what is seen here counts).
        collect_after_interrupt: A job stopped by Ctrl-C still has its results
            collected (and reported) before rtk exits.
        tear_down: The cluster is taken down at the end, also when a step failed.
    """

    cluster: str
    head: str
    nodes: tuple[str, ...]
    preflight: PreflightPolicy
    job: JobRequest
    report: bool
    excluded: tuple[Exclusion, ...] = ()
    driver_ahead: bool = False
    bring_up: bool = False
    status: bool = False
    save_preflight: bool = True
    smoke: bool = False
    fetch: bool = True
    collect_after_interrupt: bool = False
    tear_down: bool = False

    @property
    def run_dir(self) -> str | None:
        """The run directory the job writes, if it has one."""
        return self.job.run_dir

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps ``execute`` runs, in order (``PREFLIGHT`` even when skipped)."""
        steps = [Step.UP] if self.bring_up else []
        steps += [Step.STATUS] if self.status else []
        steps.append(Step.PREFLIGHT)
        steps += [Step.SMOKE] if self.smoke else []
        steps.append(Step.JOB)
        if self.run_dir:
            steps.append(Step.COLLECT)
            steps += [Step.REPORT] if self.report else []
        steps += [Step.DOWN] if self.tear_down else []
        return tuple(steps)

    @property
    def preflight_file(self) -> str | None:
        """Where the checks' report is kept, or None when it is not."""
        if self.preflight is PreflightPolicy.SKIP or not self.save_preflight or not self.run_dir:
            return None
        return f"{self.run_dir}/preflight.json"

    def render(self) -> str:
        """The plan as text (``--dry-run``): one numbered line per step."""
        lines = [f"cluster {self.cluster!r}: {len(self.nodes)} node(s), head {self.head}"]
        lines += [f"   excluded: {e.describe()}" for e in self.excluded]
        for number, step in enumerate(self.steps, 1):
            text = self._describe(step).rstrip("\n").split("\n")
            lines.append(f"{number}. {text[0]}")
            lines += text[1:]
        return "\n".join(lines) + "\n"

    def _describe(self, step: Step) -> str:
        run_dir = self.run_dir
        if step is Step.UP:
            return (
                "up: start Ray on every node, head first (the plan above), and wait for "
                "them; the job below carries rtk's source unless every node imports this one"
            )
        if step is Step.STATUS:
            return "status: the nodes Ray sees alive, and their resources"
        if step is Step.PREFLIGHT:
            if self.preflight is PreflightPolicy.SKIP:
                return "preflight: skipped"
            saved = f", saved as {self.preflight_file}" if self.preflight_file else ""
            return f"preflight ({self.preflight.value}): the fast checks on every node{saved}"
        if step is Step.SMOKE:
            return "smoke: a Ray task pinned to every node"
        if step is Step.JOB:
            text = "job: " + self.job.render()
            if self.driver_ahead:
                text += (
                    "   its driver starts once the head has its files, imports what it "
                    "needs while the nodes join, and waits until the cluster is up (and "
                    "checked)\n"
                )
            return text
        if step is Step.COLLECT:
            where = "from the head when not here" if self.fetch else "as this machine sees it"
            return f"collect: the run's results into {run_dir} ({where})"
        if step is Step.REPORT:
            return f"report: {run_dir}/report"
        return "down: stop Ray on every node, also when a step failed"
