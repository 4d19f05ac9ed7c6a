"""The watchdog a job driver runs beside its training: notice a stall, say where, act.

A thread of the driver (``rtk train``'s ``train/job.py``, ``rtk torchrun``'s
``torchrun/fanout.py``) follows the ranks' marker files it can read on its node
(``MarkerFollower``: the head's own ranks, or every rank's when the run directory is
shared), feeds their steps and phases to the ``StallDetector`` and asks it about once
a second. Once no step has come for half the timeout it starts a warm evidence taker
on every node (``collect.EvidenceTakers``: a node with busy cores may take longer to
start a Ray worker than its time to answer). On a stall it collects every node's
evidence at once (``collect``), names the
suspects (``diagnosis``), adds the stall to ``stall.json`` and prints the diagnosis in
the job's log; then the policy:

- ``report``: keep waiting; the diagnosis is printed once per stall, and a line when
  the run resumes;
- ``abort``: the driver's ``abort`` callback stops the job on every node, and the
  driver exits with ``STALL_EXIT``;
- ``restart-excluding``: as ``abort``, and the driver's exit tells rtk to exclude the
  suspect nodes and resume from the last checkpoint (``stall.json`` names them).

One stall is watched at a time: while the evidence is collected the detector is not
asked. The thread's cost is a ``stat`` and a read of what was appended per marker
file per poll.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable

from toolkit.rundir import RunDir
from toolkit.rundir.markers import MarkerFollower
from toolkit.stall.collect import EvidenceTakers, collect_evidence, ray_node_ids, ray_nodes_now
from toolkit.stall.detector import StallDetector
from toolkit.stall.diagnosis import Diagnosis, diagnose
from toolkit.stall.node_exclusion import suspect_nodes
from toolkit.stall.records import NodeEvidence, StallRecord, append_stall
from toolkit.stall.settings import REPORT, RESTART_EXCLUDING, WatchSettings
from toolkit.stall.slow import SlowWatch

POLL_S = 1.0


Collector = Callable[[str, float], list[NodeEvidence]]
"""Gathers every node's evidence: (run_dir, per_node_timeout_s) -> one per node."""


def collect_all(
    run_dir: str, per_node_timeout_s: float, takers: EvidenceTakers | None = None
) -> list[NodeEvidence]:
    """Every Ray node's evidence for the run in ``run_dir`` (the driver's Ray, now).

    A node Ray lost since this process saw it alive gives why instead. A node with
    one of ``takers`` is asked through it.
    """
    now = ray_nodes_now()
    found = collect_evidence(now.alive, run_dir, per_node_timeout_s, takers=takers)
    return found + [NodeEvidence(name, error=why) for name, why in now.lost.items()]


class Watchdog:
    """Watches one run from its job driver (see the module's docstring).

    Args:
        run_dir: The run directory, as this node sees it.
        settings: The policy and timeouts.
        say: Prints a line in the job's log.
        abort: Stops the job on every node (``abort``; ``restart-excluding`` too when
            no ``restart`` is given).
        restart: Takes the suspects out and lets the run resume (``restart-excluding``).
        collector: Gathers every node's evidence (tests pass their own; by default
            the driver's Ray, through warm takers).
        clock: The wall clock (time.time()); markers carry wall times.
        poll_s: How often the marker files are read and the detector asked.
        from_first_step: Watch only once a rank has finished a step (a command that
            may write no markers at all: ``rtk telemetry record``'s).
    """

    def __init__(
        self,
        run_dir: str,
        settings: WatchSettings,
        say: Callable[[str], None],
        abort: Callable[[StallRecord], None] | None = None,
        restart: Callable[[StallRecord], None] | None = None,
        collector: Collector | None = None,
        clock: Callable[[], float] = time.time,
        poll_s: float = POLL_S,
        from_first_step: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.settings = settings
        self._say, self._abort, self._restart = say, abort, restart
        # On the driver's Ray, the takers are started when a stall nears (``_warm``);
        # None with a collector of the caller's.
        self.takers = EvidenceTakers() if collector is None else None
        self._collect: Collector = collector or self._collect_through_takers
        self._warmed = False  # since the last step
        self._clock, self._poll_s = clock, poll_s
        self.follower = MarkerFollower(run_dir)
        self.detector = StallDetector(
            clock(),
            timeout_s=settings.timeout_s,
            startup_timeout_s=settings.startup_timeout_s,
            floor_s=settings.floor_s,
        )
        self._waiting_for_a_step = from_first_step
        # Slow, not stuck: a rank last at most recent steps is named once in the log.
        self.slow = SlowWatch(run_dir)
        self.stalls: list[StallRecord] = []
        self.aborted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        """Watch in a daemon thread until ``stop``."""
        if self.takers is not None:
            try:
                ray_node_ids()  # the nodes' names, remembered while every node is alive
            except Exception as e:  # noqa: BLE001 - the watchdog never ends the run
                self._say(f"stall watchdog: could not list Ray's nodes: {e}")
        self._thread = threading.Thread(target=self._run, name="rtk-stall-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (returns once the thread has, or after a poll)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._poll_s * 2)
        if self.takers is not None:
            self.takers.close()

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - the watchdog never ends the run
                self._say(f"stall watchdog: {type(e).__name__}: {e}")

    def tick(self) -> StallRecord | None:
        """Read the new markers, ask the detector, handle a stall; the stall, if one."""
        for progress in self.follower.poll():
            if progress.event == "step_end" and progress.step is not None:
                self._waiting_for_a_step = self._warmed = False
                lasted_s = self.detector.step_done(progress.step, progress.wall_s)
                if lasted_s is not None:
                    self._say(f"resumed at step {progress.step} after {lasted_s:.0f} s")
            elif progress.phase is not None:
                self.detector.phase(progress.phase, progress.wall_s, progress.step)
        if self._waiting_for_a_step:
            return None
        slow_line = self.slow.tick(self._clock())
        if slow_line is not None:
            self._say(slow_line)
        now_s = self._clock()
        stall = self.detector.check(now_s)
        if stall is None and not self._warmed and self.detector.nearing(now_s):
            self._warm()
        if stall is None or self._stop.is_set():
            return None
        began = time.monotonic()
        self._say(
            f"no rank finished a step for {stall.stalled_s:.0f} s (timeout "
            f"{stall.timeout_s:.0f} s): asking every node for its ranks' stacks"
        )
        nodes = self._collect(self.run_dir, self.settings.per_node_timeout_s)
        diagnosis = diagnose(nodes, stall, self.follower.rank_nodes or None)
        if self._stop.is_set() or diagnosis.every_rank_exited:
            # The run ended while its last step was waited for (a driver slow to see its
            # ranks' exits): an end, not a stall. Nothing is recorded or done.
            return None
        record = diagnosis.to_record(
            nodes, self._clock(), time.monotonic() - began, self.settings.policy
        )
        if self.settings.policy == RESTART_EXCLUDING and self._restart is not None:
            record = dataclasses.replace(record, excluded=tuple(suspect_nodes(record)))
        self.stalls.append(record)
        try:
            append_stall(RunDir(self.run_dir).stall, record)
        except OSError as e:
            self._say(f"could not write {RunDir(self.run_dir).stall}: {e}")
        self._print(diagnosis)
        policy = self.settings.policy
        if policy == RESTART_EXCLUDING and self._restart is not None:
            self._restart(record)
        elif policy != REPORT and self._abort is not None:
            self.aborted.set()
            self._say(f"--on-stall {policy}: stopping the job on every node")
            self._abort(record)
        return record

    def _warm(self) -> None:
        """A taker on every node Ray has now, once per wait for a step."""
        self._warmed = True
        if self.takers is not None:
            self.takers.warm(ray_node_ids().values())

    def _collect_through_takers(
        self, run_dir: str, per_node_timeout_s: float
    ) -> list[NodeEvidence]:
        return collect_all(run_dir, per_node_timeout_s, self.takers)

    def _print(self, diagnosis: Diagnosis) -> None:
        for line in diagnosis.lines():
            self._say(line)
        self._say(f"every rank's stack: {RunDir(self.run_dir).stall} (rtk stall-check RUN)")


def run_dir_from_env() -> str | None:
    """The run directory rtk gave this job (``RTK_RUN_DIR``), if any."""
    value = os.environ.get("RTK_RUN_DIR")
    return os.path.expanduser(value) if value else None
