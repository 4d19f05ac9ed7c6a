"""One process's marker stream: the step it is in, and the file it writes.

rtk sets ``RTK_RUN_DIR`` in every process of a job it runs. Without it there is no
recorder (``active`` is None) and the public API does nothing. With it, the
``Recorder`` costs nothing until its first write; then it

1. finds who this process is (``toolkit.markers.identity.discover``): the rank names
   the file, ``markers/rank-NNNNN.jsonl``, so it is fixed from then on;
2. opens rtk's ``MarkerWriter`` there (imported only now, so importing
   ``toolkit.markers`` loads nothing beyond the standard library);
3. writes ``run_start`` with ``steps_from`` (how steps are found: ``api``, ``auto``,
   ``hf``, ``lightning``, ``ray_train``, ``rtk``);
4. registers ``run_end`` for the process's exit;
5. with the Flight Recorder on, starts the thread that dumps it when a stall asks
   (``toolkit.markers.flight``).

Writes take one lock, so threads may share a recorder. A forked child (a DataLoader
worker, say) inherits the parent's open file and rank: it records nothing. A write
that fails (disk full, run directory gone) turns the recorder off with one warning:
markers never stop training.

The step numbering follows the calls: ``begin_step(None)`` begins the step after the
last one (0 first); ``end_step(None)`` ends the step begun, or, when none is open,
the step after the last one (for callers who only see steps end). Phases, barriers
and the user's events carry the current step (the last one begun), or None before
the first. ``defer_step_begin`` is for hooks that know a step has ended but not when
the next begins: its ``step_begin`` is written at the next activity (any write, or
``flush_pending``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from toolkit.markers.identity import Identity, discover

if TYPE_CHECKING:
    from toolkit.json_types import JsonValue
    from toolkit.markers.flight import FlightDumper
    from toolkit.rundir.markers import MarkerWriter

RUN_DIR_VARIABLE = "RTK_RUN_DIR"
# How the steps of a run were found, as run_start's steps_from says.
STEPS_FROM = ("api", "auto", "hf", "lightning", "ray_train", "rtk")

_log = logging.getLogger(__name__)


class Recorder:
    """The marker stream of this process, for one run directory."""

    def __init__(self, run_dir: str, who: Callable[[], Identity] = discover) -> None:
        """A recorder that writes nothing until its first event.

        Args:
            run_dir: The run directory (``RTK_RUN_DIR``).
            who: Finds the process's identity at the first write.
        """
        self.run_dir = run_dir
        self._who = who
        self._lock = threading.Lock()
        self._writer: MarkerWriter | None = None
        self._off = False  # a write failed, the process forked, or run_end was written
        self._steps_from = "api"
        self._step: int | None = None  # the last step begun (or ended without a begin)
        self._open = False  # a step_begin is written and its step_end is not
        self._ended: int | None = None
        self._pending: int | None = None  # a step whose step_begin waits for activity
        self._flight: FlightDumper | None = None  # answers a stall's ask for collectives

    @property
    def writing(self) -> bool:
        """Whether this recorder still writes (False after a failure, a fork or the end)."""
        return not self._off

    @property
    def started(self) -> bool:
        """Whether ``run_start`` is written."""
        return self._writer is not None

    @property
    def current_step(self) -> int | None:
        """The step events are written under now (None before the first)."""
        return self._step

    def set_steps_from(self, source: str) -> bool:
        """Say how steps are found, for ``run_start``; False (ignored) once it is written.

        Raises:
            ValueError: ``source`` is not one of ``STEPS_FROM``.
        """
        check_steps_from(source)
        with self._lock:
            if self._writer is not None or self._off:
                return False
            self._steps_from = source
            return True

    def begin_step(self, n: int | None = None) -> int:
        """Write ``step_begin`` for step ``n`` (None: the next); returns the step."""
        with self._lock:
            step = self._next() if n is None else n
            self._pending = None
            self._emit("step_begin", step, {})
            self._step, self._open = step, True
            return step

    def end_step(self, n: int | None = None, fields: Mapping[str, JsonValue] | None = None) -> int:
        """Write ``step_end`` for step ``n`` (None: the open one, else the next); returns it."""
        with self._lock:
            self._flush()
            step = n if n is not None else self._open_or_next()
            self._emit("step_end", step, fields or {})
            self._step, self._open, self._ended = step, False, step
            return step

    def defer_step_begin(self) -> None:
        """Begin the next step at the next activity rather than now."""
        with self._lock:
            if not self._open:
                self._pending = self._next()

    def flush_pending(self) -> None:
        """Write the deferred ``step_begin`` now, if one waits."""
        if self._pending is None:
            return
        with self._lock:
            self._flush()

    def write(self, event: str, fields: Mapping[str, JsonValue]) -> None:
        """Write ``event`` under the current step (a deferred step_begin goes first)."""
        with self._lock:
            self._flush()
            self._emit(event, self._step, fields)

    def close(self) -> None:
        """Write ``run_end`` (if ``run_start`` was) and close the file; later writes are dropped."""
        atexit.unregister(self.close)
        with self._lock:
            if self._writer is not None and not self._off:
                step = self._ended if self._ended is not None else self._step
                self._emit("run_end", step, {})
            self._off = True
            if self._writer is not None:
                self._writer.close()
            if self._flight is not None:
                self._flight.stop()

    def forget_after_fork(self) -> None:
        """In a forked child: write nothing, not even ``run_end`` (the file is the parent's)."""
        self._off = True
        self._lock = threading.Lock()  # the parent's may have been held at the fork

    def _open_or_next(self) -> int:
        return self._step if self._open and self._step is not None else self._next()

    def _next(self) -> int:
        if self._pending is not None:
            return self._pending
        return self._step + 1 if self._step is not None else 0

    def _flush(self) -> None:
        if self._pending is not None:
            step, self._pending = self._pending, None
            self._emit("step_begin", step, {})
            self._step, self._open = step, True

    def _emit(self, event: str, step: int | None, fields: Mapping[str, JsonValue]) -> None:
        """Write one record (the lock is held); the first write opens the stream."""
        if self._off:
            return
        try:
            if self._writer is None:
                self._writer = self._open_stream()
            self._writer.write(event, step, **fields)
        except (OSError, ValueError) as e:  # ValueError: the file was closed under us
            self._off = True
            _log.warning("rtk markers: cannot write to %s (%s); markers are off", self.run_dir, e)

    def _open_stream(self) -> MarkerWriter:
        from toolkit.rundir.markers import MarkerWriter

        who = self._who()
        writer = MarkerWriter(self.run_dir, who.rank, who.local_rank, who.world_size, who.gpu_uuid)
        writer.write("run_start", None, steps_from=self._steps_from)
        atexit.register(self.close)
        self._start_flight_dumper(who.rank)
        return writer

    def _start_flight_dumper(self, rank: int) -> None:
        """Dump the rank's Flight Recorder when a stall asks (``toolkit.markers.flight``)."""
        from toolkit.markers.flight import watch

        self._flight = watch(self.run_dir, rank)


def check_steps_from(source: str) -> None:
    """Refuse a ``steps_from`` that is not one of ``STEPS_FROM``.

    Raises:
        ValueError: It is not, naming the valid ones.
    """
    if source not in STEPS_FROM:
        raise ValueError(f"steps_from {source!r}: expected one of {', '.join(STEPS_FROM)}")


active: Recorder | None = None
"""This process's recorder; None when markers are off. The public API reads it per call."""


def reset(environ: Mapping[str, str] = os.environ) -> Recorder | None:
    """Close the current recorder (its ``run_end``) and start again from ``environ``.

    The module calls it once at import. Tests call it to switch markers on and off.
    """
    global active
    if active is not None:
        active.close()
    run_dir = environ.get(RUN_DIR_VARIABLE, "")
    # rtk's default run directories start with ~: each node's home, as rtk means it.
    active = Recorder(os.path.expanduser(run_dir)) if run_dir else None
    return active


def _off_in_forked_child() -> None:
    global active
    if active is not None:
        active.forget_after_fork()
    active = None


os.register_at_fork(after_in_child=_off_in_forked_child)
reset()
