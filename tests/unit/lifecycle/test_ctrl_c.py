"""Ctrl-C held while the main thread feeds a pool: raised between waits, the handler put back."""

from __future__ import annotations

import _thread
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolkit.lifecycle.ctrl_c import HeldCtrlC


def test_a_ctrl_c_inside_is_held_until_a_check_and_the_pool_still_shuts_down() -> None:
    before = signal.getsignal(signal.SIGINT)
    pool = ThreadPoolExecutor(max_workers=64)
    submitted = 0
    with pytest.raises(KeyboardInterrupt), HeldCtrlC() as ctrl_c:
        try:
            _thread.interrupt_main()  # as a Ctrl-C reaches the main thread
            for _ in range(2000):  # submits (the pool's own locks) go on, untouched
                pool.submit(time.sleep, 0)
                submitted += 1
            assert ctrl_c.pressed
            ctrl_c.check()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # returns: no lock left held
    assert submitted == 2000
    assert signal.getsignal(signal.SIGINT) is before


def test_a_wait_ends_at_a_ctrl_c_and_a_finished_one_raises_nothing() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        with HeldCtrlC() as ctrl_c:
            ctrl_c.wait_for([pool.submit(time.sleep, 0.01) for _ in range(4)])  # all done
        release = threading.Event()
        slow = pool.submit(release.wait, 60)
        threading.Timer(0.2, _thread.interrupt_main).start()
        try:
            with pytest.raises(KeyboardInterrupt), HeldCtrlC() as ctrl_c:
                ctrl_c.wait_for([slow])  # ended by the Ctrl-C, not by the task
            assert not slow.done()
        finally:
            release.set()


def test_a_ctrl_c_as_the_block_ends_is_raised_when_it_is_left() -> None:
    with pytest.raises(KeyboardInterrupt), HeldCtrlC() as ctrl_c:
        ctrl_c._hold(signal.SIGINT, None)  # the handler, as the signal calls it


def test_off_the_main_thread_nothing_is_installed() -> None:
    seen: list[object] = []

    def inside() -> None:
        with HeldCtrlC() as ctrl_c:
            seen.append(ctrl_c._installed)

    worker = threading.Thread(target=inside)
    worker.start()
    worker.join()
    assert seen == [False]
