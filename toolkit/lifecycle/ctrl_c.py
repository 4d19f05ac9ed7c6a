"""Ctrl-C while the main thread hands nodes to a thread pool: held, then raised where safe.

Python raises KeyboardInterrupt in the main thread at whatever bytecode it is running.
Inside the executor's own code that can be in a lock's ``__enter__`` (its idle
semaphore's condition, a future's condition) after the lock was taken and before the
``with`` that would release it: the lock is then held for good, every worker that
finishes blocks on it, and the pool's shutdown waits for them forever. ``rtk up`` of
1,024 simulated nodes interrupted mid-start hung so (the semaphore's condition, in
``ThreadPoolExecutor.submit``).

``HeldCtrlC`` turns SIGINT into a flag while the main thread submits and waits; the
code polls ``check()`` between short waits (``wait_for``) and raises KeyboardInterrupt
there, outside every lock. A Ctrl-C that comes while the block ends is raised when it
is left. Off the main thread (where no signal arrives) it does nothing.
"""

from __future__ import annotations

import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait
from types import FrameType, TracebackType
from typing import Any

POLL_S = 0.5  # how late a held Ctrl-C is raised, at most


class HeldCtrlC:
    """Hold SIGINT as a flag inside the block (see the module)."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> HeldCtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._hold)
            self._installed = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._installed:
            previous = self._previous if self._previous is not None else signal.default_int_handler
            signal.signal(signal.SIGINT, previous)
            self._installed = False
        if kind is None:
            self.check()

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.pressed = True  # a plain store: no lock, whatever the main thread holds

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C came.

        Raises:
            KeyboardInterrupt: It did.
        """
        if self.pressed:
            raise KeyboardInterrupt

    def wait_for(self, futures: list[Future[Any]]) -> None:
        """Wait until every one of ``futures`` is done, checking for Ctrl-C meanwhile.

        Raises:
            KeyboardInterrupt: Ctrl-C came.
        """
        pending = set(futures)
        while pending:
            self.check()
            _, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
        self.check()
