"""One object per command: the workflow "bring up, check, run, collect, report, tear down".

A ``Session`` holds what every step needs (inventory, plan, state store, and the
transport, opened on first use and closed when the session ends). Each step returns
a typed result from ``toolkit.flows.outcome`` and prints nothing: the CLI renders.
What a step would do is available as data first (``up_plan``, ``job_request``,
``exec_request``), which is what ``--dry-run`` prints.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from toolkit.cluster.command import NodeRun, command_line, container_lines, run_everywhere
from toolkit.cluster.connect import make_transport
from toolkit.cluster.containers.docker import check_startable
from toolkit.cluster.exclude import ExcludeError, excluded_from_state
from toolkit.cluster.plan import build_plan
from toolkit.cluster.plan_text import render_down, render_down_summary, render_up, render_up_summary
from toolkit.cluster.progress_reporter import QuietReporter, Reporter
from toolkit.cluster.ray_status import ClusterStatus, cluster_status
from toolkit.cluster.up_steps import up_steps
from toolkit.errors import JobError, RtkError
from toolkit.flows import bringup
from toolkit.flows.driver_placement import DriverAhead, gated, place_driver
from toolkit.flows.job_requests import ExecRequest, job_request
from toolkit.flows.outcome import (
    BringUpOutcome,
    CollectOutcome,
    PreflightOutcome,
    PreflightPolicy,
    ReportOutcome,
    WorkloadOutcome,
)
from toolkit.flows.run_plan import RunPlan
from toolkit.flows.stand_ins import (
    TransportFactory,
    current_job_runner,
    current_transport_factory,
)
from toolkit.inventory import Inventory
from toolkit.jobs import shipped_code
from toolkit.jobs.client import JobOutcome, job_client, run_job, submit_job
from toolkit.jobs.local_driver import LocalDriver, run_local_driver
from toolkit.jobs.request import Driver, JobRequest
from toolkit.lifecycle.down import DownResult, down
from toolkit.rundir import RunDir
from toolkit.rundir.preflight import Exclusion
from toolkit.state.store import StateStore
from toolkit.telemetry.fetch import fetch_run
from toolkit.transport.base import Transport
from toolkit.workloads import Workload

Log = Callable[[str], None]


class Session:
    """The steps of a flow on one cluster; a context manager that closes the transport."""

    def __init__(
        self,
        inventory: Inventory,
        reporter: Reporter | None = None,
        log: Log | None = None,
        store: StateStore | None = None,
        excluded: Sequence[Exclusion] | None = None,
        transport_factory: TransportFactory | None = None,
    ) -> None:
        """Plan the cluster; nothing is opened or touched yet (the state file is read).

        Args:
            inventory: The cluster.
            reporter: Receives progress of bring-up and teardown.
            log: Receives a job's log as it streams.
            store: rtk's state of the cluster (default: the inventory's name's).
            excluded: The nodes to leave out (``rtk up --exclude``); None: those the last
                ``rtk up`` left out, as the state store keeps them, so the commands after
                it (status, preflight, train) work on the nodes brought up.
            transport_factory: Makes the transport, on first use, from the inventory
                (default: the one ``transports_from`` set, else ``make_transport``, the
                inventory's own).

        Raises:
            ExcludeError: ``excluded`` names an unknown node or the head, or leaves
                fewer than ``min_nodes`` nodes.
            StateError: The state store cannot be read.
        """
        self.inventory = inventory
        self.store = store or StateStore(inventory.name)
        remembered = excluded is None
        if excluded is None:
            excluded = excluded_from_state(self.store.load(), inventory)
        try:
            self.plan = build_plan(inventory, excluded)
        except ExcludeError as e:
            if not remembered:
                raise
            raise ExcludeError(
                f"{e} (the last rtk up left them out, as {self.store.state_file} keeps it; "
                "run rtk up again, or rtk down)"
            ) from e
        self.reporter: Reporter = reporter or QuietReporter()
        self.log: Log = log or (lambda line: None)
        self._make_transport: TransportFactory = (
            transport_factory or current_transport_factory() or make_transport
        )
        self._transport: Transport | None = None
        self._parent: Session | None = None

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def transport(self) -> Transport:
        """The inventory's transport, opened on first use."""
        if self._parent is not None:
            return self._parent.transport
        if self._transport is None:
            self._transport = self._make_transport(self.inventory).__enter__()
        return self._transport

    def close(self) -> None:
        """Close the transport if this session opened it."""
        if self._transport is not None:
            transport, self._transport = self._transport, None
            transport.__exit__(None, None, None)

    def subset(self, inventory: Inventory) -> Session:
        """A session on part of this cluster (``inventory``) sharing this one's transport."""
        child = Session(
            inventory,
            self.reporter,
            self.log,
            self.store,
            excluded=(),
            transport_factory=self._make_transport,
        )
        child._parent = self
        return child

    # Plans: pure, printable, nothing touched.

    def up_plan(
        self,
        full: bool = False,
        preflight: PreflightPolicy = PreflightPolicy.SKIP,
        rotate: bool = False,
    ) -> str:
        """What ``bring_up`` would run, as text: a block per command shape, or every node.

        ``preflight`` and ``rotate`` as ``bring_up`` takes them: the steps they add.

        Raises:
            ClusterError: A node's container runs only under SLURM (apptainer, pyxis).
        """
        check_startable(self.inventory, [n.node for n in self.plan.nodes])
        steps = up_steps(rotate, preflight is not PreflightPolicy.SKIP)
        return render_up(self.plan, steps) if full else render_up_summary(self.plan, steps)

    def down_plan(self, full: bool = False) -> str:
        """What ``tear_down`` would run, as text: a line per command shape, or every node."""
        plan = build_plan(self.inventory)
        return render_down(plan) if full else render_down_summary(plan)

    def job_request(self, workload: Workload, driver: Driver = Driver.JOB) -> JobRequest:
        """The Ray job ``run_workload`` would submit, its driver placed as ``driver`` says.

        It carries rtk's source to the nodes unless the last ``rtk up`` found the
        same source installed on every node (``jobs.shipped_code``).

        Raises:
            JobError: ``driver`` is ``LOCAL`` but this machine is not the head.
        """
        same_code = shipped_code.known_same(self.store.load())
        request = job_request(self.plan, workload, ship_code=not same_code)
        return dataclasses.replace(request, driver=self.place_driver(driver))

    def place_driver(self, driver: Driver, environ: Mapping[str, str] | None = None) -> Driver:
        """Where the driver runs: ``AUTO`` decided, ``LOCAL`` checked (``place_driver``).

        Raises:
            JobError: ``LOCAL`` asked for, but the head's address is not this machine's.
        """
        return place_driver(self.plan, driver, environ)

    def exec_request(
        self, argv: Sequence[str], with_env: bool = True, timeout_s: float = 600.0
    ) -> ExecRequest:
        """What ``exec`` would run on every node."""
        command = command_line(self.plan, argv, with_env)
        return ExecRequest(
            self.inventory.name,
            self.inventory.transport,
            tuple(n.name for n in self.plan.nodes),
            command,
            timeout_s,
            container_lines(self.plan, command),
        )

    def run_plan(
        self,
        workload: Workload,
        preflight: PreflightPolicy,
        report: bool = True,
        driver: Driver = Driver.JOB,
        *,
        bring_up: bool = False,
        **steps: bool,
    ) -> RunPlan:
        """What a run of ``workload`` will do, step by step; ``flows.run.execute`` runs it.

        ``bring_up``: the cluster is brought up first, with the job's driver started
        meanwhile when ``driver_ahead`` would start one. ``steps``: the other
        ``RunPlan`` switches (``status``, ``smoke``, ``save_preflight``, ``fetch``,
        ``collect_after_interrupt``, ``tear_down``).
        """
        request = self.job_request(workload, driver)
        return RunPlan(
            self.inventory.name,
            self.plan.head.name,
            tuple(n.name for n in self.plan.nodes),
            preflight,
            request,
            report,
            self.plan.excluded,
            driver_ahead=bring_up and gated(workload, request),
            bring_up=bring_up,
            **steps,
        )

    def driver_ahead(
        self, workload: Workload, driver: Driver, request: JobRequest | None = None
    ) -> DriverAhead | None:
        """A driver for ``workload`` to start while the cluster comes up, or None.

        Only the trainer's entrypoint waits at the gate (``toolkit.driver_gate``), and
        only a local driver can start before Ray answers (a Jobs API job is submitted
        to the running cluster). Pass its ``start`` as ``bring_up``'s ``head_ready``,
        then it to ``run_workload``; ``cancel`` it when the bring-up fails.

        Raises:
            JobError: ``driver`` is ``LOCAL`` but this machine is not the head, or the
                job's runtime environment needs the Jobs API.
        """
        request = request or self.job_request(workload, driver)
        if not gated(workload, request):
            return None
        local = LocalDriver(
            self.plan, request.entrypoint, request.runtime_env, request.submission_id, self.log
        )
        return DriverAhead(request, local)

    # Steps.

    def bring_up(
        self,
        preflight: PreflightPolicy = PreflightPolicy.ENFORCE,
        rotate: bool = False,
        head_ready: Callable[[], None] | None = None,
    ) -> BringUpOutcome:
        """Start Ray everywhere, then the fast checks as ``preflight`` says.

        ``rotate``: a new token, CA and certificates first (refused while it runs).
        ``head_ready``: called once the head has its files (``lifecycle.start``).

        Raises:
            PreflightFailedError: A check failed under ``ENFORCE`` (the cluster stays up).
        """
        return bringup.bring_up(
            self.plan, self.transport, self.store, self.reporter, preflight, rotate, head_ready
        )

    def status(self) -> ClusterStatus:
        """Which nodes are alive in Ray."""
        return cluster_status(self.plan, self.transport)

    def preflight(
        self,
        run_dir: str,
        policy: PreflightPolicy = PreflightPolicy.ENFORCE,
        save: bool = True,
    ) -> PreflightOutcome:
        """The fast checks for a run in ``run_dir`` (kept there as preflight.json).

        Raises:
            PreflightFailedError: A check failed under ``ENFORCE``.
        """
        return bringup.preflight(self.plan, self.transport, run_dir, policy, save)

    def smoke(self) -> dict[str, dict[str, str]]:
        """A Ray task on every node: node -> where it ran."""
        from toolkit.cluster.smoke import run_smoke

        return run_smoke(self.plan, self.transport)

    def exec(
        self, argv: Sequence[str], with_env: bool = True, timeout_s: float = 600.0
    ) -> list[NodeRun]:
        """Run ``argv`` on every node at once; one result per node."""
        return run_everywhere(
            self.plan, self.transport, argv, with_env=with_env, timeout_s=timeout_s
        )

    def run_workload(
        self,
        workload: Workload,
        driver: Driver = Driver.JOB,
        ahead: DriverAhead | None = None,
        request: JobRequest | None = None,
    ) -> WorkloadOutcome:
        """Run ``workload`` as a Ray job to its end, its log streamed to ``log``.

        ``driver`` says where the job's driver runs (``Driver``). ``ahead``: the driver
        ``driver_ahead`` made for it, started during the bring-up: it is let through.
        ``request``: the job as planned (``RunPlan.job``); None: made now.

        Raises:
            RtkError: Its telemetry options are invalid (before anything starts), the
                Jobs API cannot be reached, or the driver cannot run where asked.
            KeyboardInterrupt: Interrupted; the job was stopped first.
        """
        workload.check()
        if ahead is not None:
            request = ahead.request
        elif request is None:
            request = self.job_request(workload, driver)
        workload.remember(self.store)
        if ahead is not None:
            try:
                ahead.driver.release()
            except KeyboardInterrupt:
                ahead.driver.interrupt()  # let through already: stopped like a running one
                raise
            return WorkloadOutcome(request, ahead.driver.wait())
        return WorkloadOutcome(request, self.run_request(request))

    def run_request(self, request: JobRequest, renumber: bool = True) -> JobOutcome:
        """Run ``request`` to its end, where its ``driver`` says, its log to ``log``.

        ``renumber``: when its submission id is taken, try ``-2``, ``-3``... after it
        (False: a taken id is an error; the user gave it).

        Raises:
            RtkError: The Jobs API cannot be reached, or the driver cannot run here.
            KeyboardInterrupt: Interrupted; the job was stopped first.
        """
        runner = current_job_runner()
        if runner is not None:
            return runner(request)
        if request.driver is Driver.LOCAL:
            return run_local_driver(
                self.plan, request.entrypoint, request.runtime_env, request.submission_id, self.log
            )
        return run_job(
            job_client(self.plan, self.store),
            request.entrypoint,
            dict(request.runtime_env),
            request.submission_id,
            self.log,
            renumber=renumber,
        )

    def submit_request(self, request: JobRequest, renumber: bool = True) -> str:
        """Submit ``request`` to the Jobs API and return its job id at once (not followed).

        Raises:
            JobError: Its driver is local (it runs only while rtk waits for it).
            RtkError: The Jobs API cannot be reached or refused the job.
        """
        if request.driver is Driver.LOCAL:
            raise JobError("a job whose driver runs here cannot be left running; --driver job")
        return submit_job(
            job_client(self.plan, self.store),
            request.entrypoint,
            dict(request.runtime_env),
            request.submission_id,
            renumber=renumber,
        )

    def collect(self, run_dir: str, fetch: bool = True) -> CollectOutcome:
        """Make the run's results readable here: copy them from the head when needed.

        When this machine does not see them (no shared filesystem with the head),
        they go to the same path here, or to ./RUN_ID when that path cannot be
        written. Problems are results, not raised: the run itself is over.
        """
        path = Path(os.path.expanduser(run_dir))
        if RunDir(path).seen_here:
            return CollectOutcome(path, path)
        if not fetch:
            return CollectOutcome(path, None)
        for dest in (path, Path.cwd() / path.name):
            try:
                dest.mkdir(parents=True, exist_ok=True)
            except OSError:
                continue
            try:
                copied = fetch_run(self.plan, self.transport, run_dir, dest)
            except RtkError as e:
                return CollectOutcome(path, None, error=e)
            return CollectOutcome(path, dest, copied)
        return CollectOutcome(path, None, writable=False)

    def report(self, collected: CollectOutcome) -> ReportOutcome:
        """Build the report of a collected run (summary, report.html and the rest)."""
        if collected.path is None:
            return ReportOutcome(collected.run_dir)
        from toolkit.telemetry.report import build_report, format_summary, write_report

        try:
            report = build_report(collected.path)
            files = write_report(report)
        except RtkError as e:
            return ReportOutcome(collected.path, error=e)
        return ReportOutcome(collected.path, format_summary(report), Path(files.html))

    def tear_down(self) -> DownResult:
        """Stop rtk's Ray on every node of the inventory, the excluded ones too (harmless)."""
        return down(build_plan(self.inventory), self.transport, self.store, self.reporter)
