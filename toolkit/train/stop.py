"""SIGINT for a training driver whose run stops with a checkpoint: ask, then wait.

Ray Train's ``fit()`` installs a SIGINT handler of its own when it is called from the
main thread, and that handler aborts the workers at once: nothing is saved. A run
that stops with a checkpoint (``TrainConfig.stops_with_checkpoint``) calls ``fit()``
in a thread instead (Ray Train then installs none, as under Tune) and handles SIGINT
here. The first SIGINT writes the run directory's stop request; every rank sees it
after its current step (``toolkit/train/loop.py``), saves a checkpoint there and
returns, and ``fit()`` returns. A second SIGINT stops waiting: KeyboardInterrupt in
the main thread, whose ``finally`` still collects the telemetry, and the workers end
with the driver.

Runs on the Ray job driver: standard library and ``toolkit.rundir`` only.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Protocol, TypeVar

from toolkit.rundir import RunDir

R = TypeVar("R", covariant=True)
T = TypeVar("T")

# The driver's exit status when it stopped as asked before the last step (128+SIGINT).
STOPPED_EXIT = 130


class Fittable(Protocol[R]):
    """What ``StopOnInterrupt.fit`` runs: a Ray Train trainer."""

    def fit(self) -> R:
        """Train; return the result."""


class StopOnInterrupt:
    """Turns SIGINT into the run directory's stop request while ``fit`` runs.

    Attributes:
        run_dir: The run whose stop request this writes.
        requested: Whether a stop was asked for.
    """

    def __init__(self, run_dir: RunDir, poll_s: float = 0.5) -> None:
        """Handle SIGINT for the run in ``run_dir``; ``poll_s``: how often to look up."""
        self.run_dir = run_dir
        self.poll_s = poll_s
        self.requested = False

    def clear(self) -> None:
        """Remove a stop request left by an earlier attempt (an earlier allocation's)."""
        self.run_dir.stop_request.unlink(missing_ok=True)

    def request(self, why: str) -> None:
        """Ask every rank to checkpoint after its current step and end."""
        self.requested = True
        self.run_dir.stop_request.parent.mkdir(parents=True, exist_ok=True)
        self.run_dir.stop_request.write_text(
            json.dumps({"why": why, "wall_s": time.time()}) + "\n", encoding="utf-8"
        )

    def fit(self, trainer: Fittable[T], until: threading.Event | None = None) -> T | None:
        """``fit_in_thread``, with SIGINT handled here until it returns.

        Raises:
            KeyboardInterrupt: A second SIGINT came before the run stopped.
            BaseException: Whatever ``fit`` raised.
        """
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            return fit_in_thread(trainer, until, self.poll_s)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        print(
            "rtk train: SIGINT: every rank saves a checkpoint after its current step, then "
            "the run ends (SIGINT again: end at once, unsaved)",
            flush=True,
        )
        self.request("SIGINT")


def fit_in_thread(
    trainer: Fittable[T], until: threading.Event | None = None, poll_s: float = 0.5
) -> T | None:
    """``trainer.fit()`` in a daemon thread, the main thread waiting for it.

    None when ``until`` is set first: the thread is left to end with the driver, whose
    exit ends the workers Ray Train started for it.

    Raises:
        BaseException: Whatever ``fit`` raised.
    """
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(trainer.fit())
        except BaseException as e:  # noqa: BLE001 - raised again in the main thread
            errors.append(e)

    thread = threading.Thread(target=run, name="rtk-train-fit", daemon=True)
    thread.start()
    while thread.is_alive() and not (until is not None and until.is_set()):
        thread.join(poll_s)
    if errors:
        raise errors[0]
    return results[0] if results else None


def stopped(stop: StopOnInterrupt | None) -> bool:
    """Whether the run was asked to stop (it may still have reached its last step)."""
    return stop is not None and stop.requested
