"""One job driver's life on the head, whatever its workload.

``JobDriver.run`` walks it in one order:

1. what runs around the run begins (``Beside``: the telemetry's samplers and its idle
   baseline);
2. the stall watchdog (given ``stall`` settings and a run directory) and the power
   policy (given one that sets limits, and a run directory) start beside the run;
3. the workload runs, in the main thread;
4. whatever ends it (its own end, an exception, a stall the policy aborts, SIGTERM or
   SIGINT), the teardown: the GPU limits go back first, then the watchdog stops, then
   what ran around the run ends (the cooldown, the ranks' files gathered, the samplers
   stopped).

On a signal it was given to handle (``DriverOptions.signals``) the limits go back and
the workload is stopped from the handler, before anything else, for a job's stop leaves
its driver seconds (Ray's job stop SIGKILLs it after its wait); the signal then ends
``run`` with ``SystemExit(128 + signal)``, through the teardown. A second signal ends
it at once. On a stall the policy aborts, the workload is stopped and ``run`` returns
``STALL_EXIT`` once it has ended; under ``restart-excluding`` a workload that can
restart (``Restartable``) is asked to, and stopped when it cannot.

Runs on the Ray job driver: nothing here reaches the CLI or the transports.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol, runtime_checkable

from toolkit.power.ask import PowerNodes, RayPowerNodes
from toolkit.power.driver import PowerDriver
from toolkit.power.settings import PowerSettings
from toolkit.stall.records import StallRecord
from toolkit.stall.settings import STALL_EXIT, WatchSettings
from toolkit.stall.watchdog import Collector, Watchdog


class Workload(Protocol):
    """What a job driver runs: its own part, and nothing else."""

    def run(self) -> int:
        """Run to the end, in the main thread; the exit status the job should have."""
        ...

    def stop(self) -> None:
        """End ``run`` soon, on every node (from another thread, or a signal handler)."""
        ...


@runtime_checkable
class Restartable(Protocol):
    """A workload that can go on without some nodes (``--on-stall restart-excluding``)."""

    def restart(self, record: StallRecord) -> str | None:
        """Take ``record.excluded`` out and let the run resume; why not, when it cannot."""
        ...


class Beside(Protocol):
    """What runs around the run: the telemetry (``toolkit.telemetry.around``)."""

    def begin(self) -> None:
        """Start, before the run (the samplers, then the idle baseline)."""
        ...

    def end(self, code: int | None) -> None:
        """End, after the run and its limits' put-back.

        ``code`` is the run's exit status, None when an exception or a signal ended it.
        """
        ...


@dataclass(frozen=True)
class DriverOptions:
    """What runs beside a workload, and how the driver speaks.

    Attributes:
        run_dir: The run directory as the head sees it; None: no watchdog, no policy.
        say: Prints one of rtk's lines in the job's log.
        stall: The stall watchdog's settings; None: no watchdog.
        power: The power policy (one that sets no limit starts nothing).
        signals: The signals that stop the workload (the others are left as they are).
        watch_from_first_step: The watchdog waits for a first step before it watches
            (a command that may write no markers at all).
    """

    run_dir: str | None
    say: Callable[[str], None]
    stall: WatchSettings | None = None
    power: PowerSettings = field(default_factory=PowerSettings)
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
    watch_from_first_step: bool = False


class JobDriver:
    """Runs one workload with everything a job driver runs beside it (see the module).

    Args:
        options: What runs beside it.
        workload: The driver's own part.
        beside: What runs around the run (the telemetry), if anything.
        collector: Gathers every node's evidence on a stall (tests pass their own;
            by default the watchdog's, on the driver's Ray).
        power_nodes: The nodes' GPUs for the power policy (tests pass a model; by
            default Ray's nodes, asked through tasks).
    """

    def __init__(
        self,
        options: DriverOptions,
        workload: Workload,
        beside: Beside | None = None,
        collector: Collector | None = None,
        power_nodes: PowerNodes | None = None,
    ) -> None:
        self.options, self.workload, self.beside = options, workload, beside
        self._collector, self._power_nodes = collector, power_nodes
        self.watchdog: Watchdog | None = None
        self.power: PowerDriver | None = None
        self.aborted = threading.Event()
        self._signalled = False

    def run(self) -> int:
        """Walk the driver's life (see the module); the job's exit status.

        Raises:
            SystemExit: A signal it handles came (128 + the signal).
            BaseException: Whatever the workload raised, after the teardown.
        """
        previous = {s: signal.signal(s, self._on_signal) for s in self.options.signals}
        code: int | None = None
        try:
            if self.beside is not None:
                self.beside.begin()
            self._start_beside_the_run()
            try:
                ended = self.workload.run()
            finally:
                self.put_back()
                if self.watchdog is not None:
                    self.watchdog.stop()
            code = STALL_EXIT if self.aborted.is_set() else ended
            return code
        finally:
            try:
                if self.beside is not None:
                    self.beside.end(code)
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    def put_back(self) -> None:
        """The GPU limits the policy set, back (at most once; from any thread)."""
        if self.power is not None:
            self.power.stop()

    def abort(self, record: StallRecord | None = None) -> None:
        """Stop the workload after a stall: ``run`` returns ``STALL_EXIT``."""
        self.aborted.set()
        self.workload.stop()

    def _start_beside_the_run(self) -> None:
        run_dir, options = self.options.run_dir, self.options
        if run_dir and options.stall is not None:
            self.watchdog = Watchdog(
                run_dir,
                options.stall,
                options.say,
                abort=self.abort,
                restart=self._restart if isinstance(self.workload, Restartable) else None,
                collector=self._collector,
                from_first_step=options.watch_from_first_step,
            ).start()
        if run_dir and options.power.acts:
            nodes = self._power_nodes or RayPowerNodes(owner=run_dir)
            self.power = PowerDriver(
                run_dir, options.power, lambda line: options.say(f"power: {line}"), nodes
            ).start()

    def _restart(self, record: StallRecord) -> None:
        assert isinstance(self.workload, Restartable)
        why = self.workload.restart(record)
        if why is not None:
            self.options.say(f"--on-stall restart-excluding: {why}; stopping instead")
            self.abort(record)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self._signalled:
            self._signalled = True
            self.put_back()  # first: the job's stop leaves seconds
            self.workload.stop()
        raise SystemExit(128 + signum)
