"""What a ``Session`` reaches its nodes and runs its jobs with, when a caller stands in.

By default a session opens the inventory's own transport and runs a Ray job through
the cluster's Jobs API or a local driver. ``transports_from`` and ``jobs_from`` change
that for a stretch of code (in this thread): the CLI sets the transport from click's
``ctx.obj``, so a simulation can stand in for the nodes of a whole command, and a
simulated cluster's runs can hold a job too. The planner, executor, wait loop,
preflight and teardown that run are rtk's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from toolkit.inventory import Inventory
from toolkit.jobs.client import JobOutcome
from toolkit.jobs.request import JobRequest
from toolkit.transport.base import Transport

TransportFactory = Callable[[Inventory], Transport]
JobRunner = Callable[[JobRequest], JobOutcome]

# What a Session reaches its nodes with when none is given: the inventory's transport,
# unless ``transports_from`` says otherwise for a stretch of code.
_FACTORY: ContextVar[TransportFactory | None] = ContextVar("rtk_transport_factory", default=None)

# What runs a Ray job to its end when not the cluster's Jobs API or local driver.
_JOBS: ContextVar[JobRunner | None] = ContextVar("rtk_job_runner", default=None)


@contextmanager
def jobs_from(runner: JobRunner) -> Iterator[None]:
    """Jobs that sessions run inside the block (in this thread) go to ``runner``."""
    token = _JOBS.set(runner)
    try:
        yield
    finally:
        _JOBS.reset(token)


@contextmanager
def transports_from(factory: TransportFactory) -> Iterator[None]:
    """Sessions opened inside the block (in this thread) use ``factory`` for transports."""
    token = _FACTORY.set(factory)
    try:
        yield
    finally:
        _FACTORY.reset(token)


def current_transport_factory() -> TransportFactory | None:
    """The factory ``transports_from`` set for this stretch of code, or None."""
    return _FACTORY.get()


def current_job_runner() -> JobRunner | None:
    """The runner ``jobs_from`` set for this stretch of code, or None."""
    return _JOBS.get()
