"""The calls a training script makes: steps, phases, barriers, its own events.

Each call looks up this process's recorder (``toolkit.markers.recorder.active``) and
returns at once when there is none, so a script that calls them everywhere runs the
same without rtk. The checks on what is asked (a reserved event name, a field rtk's
records already use) are made on and off alike: a script that is wrong under rtk is
wrong without it too.
"""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING

from toolkit.markers import recorder as _recorder

if TYPE_CHECKING:
    from toolkit.json_types import JsonValue
    from toolkit.markers.recorder import Recorder

# The events rtk's report reads with a meaning of their own; mark() refuses them.
RESERVED_EVENTS = frozenset(
    {"run_start", "step_begin", "step_end", "phase_begin", "phase_end", "barrier", "run_end"}
)
# The keys every record already has (toolkit.rundir.markers); an event's field may not
# be one of them.
RECORD_KEYS = frozenset(
    {"v", "event", "step", "wall_s", "mono_s", "node", "hostname", "rank", "local_rank"}
    | {"world_size", "gpu_uuid", "pid"}
)
_JSON_TYPES = (str, int, float, bool, type(None), list, dict)


class _Nothing(AbstractContextManager[None]):
    """What ``step`` and ``phase`` return when markers are off."""

    __slots__ = ()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


_NOTHING = _Nothing()


class _Step(AbstractContextManager[None]):
    """``with step():`` when markers are on: step_begin on entry, step_end on exit."""

    __slots__ = ("_recorder", "_n", "_tokens", "_samples")

    def __init__(
        self, recorder: Recorder, n: int | None, tokens: int | None, samples: int | None
    ) -> None:
        self._recorder, self._n, self._tokens, self._samples = recorder, n, tokens, samples

    def __enter__(self) -> None:
        self._n = self._recorder.begin_step(self._n)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._recorder.end_step(self._n, _step_fields(self._tokens, self._samples, None))


class _Phase(AbstractContextManager[None]):
    """``with phase(name):`` when markers are on."""

    __slots__ = ("_recorder", "_name")

    def __init__(self, recorder: Recorder, name: str) -> None:
        self._recorder, self._name = recorder, name

    def __enter__(self) -> None:
        self._recorder.write("phase_begin", {"name": self._name})

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._recorder.write("phase_end", {"name": self._name})


def enabled() -> bool:
    """Whether this process writes markers (under rtk, with ``RTK_RUN_DIR`` set)."""
    active = _recorder.active
    return active is not None and active.writing


def step(
    n: int | None = None, *, tokens: int | None = None, samples: int | None = None
) -> AbstractContextManager[None]:
    """One training step, as a context manager: ``with markers.step(tokens=4096): ...``.

    Writes ``step_begin`` on entry and ``step_end`` on exit (also when the body
    raises), with ``tokens`` (this rank's tokens in the step) and ``samples`` when
    given. When the counts are known only at the end, use ``begin_step``/``end_step``.

    Args:
        n: The step's number; None: the step after the previous one (0 first).
        tokens: This rank's tokens in the step, for energy per token.
        samples: This rank's samples in the step.
    """
    active = _recorder.active
    if active is None:
        return _NOTHING
    return _Step(active, n, tokens, samples)


def begin_step(n: int | None = None) -> None:
    """Begin step ``n`` (None: the step after the previous one, 0 first)."""
    active = _recorder.active
    if active is not None:
        active.begin_step(n)


def end_step(
    n: int | None = None,
    *,
    tokens: int | None = None,
    samples: int | None = None,
    loss: float | None = None,
) -> None:
    """End step ``n`` (None: the step begun, or the next when none is open).

    Args:
        n: The step's number.
        tokens: This rank's tokens in the step.
        samples: This rank's samples in the step.
        loss: The step's loss (a number; ``loss.item()``, not the tensor).
    """
    active = _recorder.active
    if active is not None:
        active.end_step(n, _step_fields(tokens, samples, loss))


def phase(name: str) -> AbstractContextManager[None]:
    """A named part of a step, as a context manager: ``with markers.phase("forward"): ...``.

    Writes ``phase_begin`` and ``phase_end`` with ``name`` under the current step.
    rtk's report knows forward, backward, optimizer, data, eval and checkpoint; any
    other name is shown as given. Phases may nest.
    """
    active = _recorder.active
    if active is None:
        return _NOTHING
    return _Phase(active, name)


def begin_phase(name: str) -> None:
    """Begin the phase ``name`` (see ``phase``)."""
    active = _recorder.active
    if active is not None:
        active.write("phase_begin", {"name": name})


def end_phase(name: str) -> None:
    """End the phase ``name``."""
    active = _recorder.active
    if active is not None:
        active.write("phase_end", {"name": name})


def barrier(group: object = None) -> None:
    """``torch.distributed.barrier(group)``, recording how long this rank waited in it.

    The barrier runs whether or not markers are on (when torch.distributed is imported
    and initialised; otherwise there is nothing to wait for). The ``barrier`` record is
    written when it lets go, with ``wait_s`` (arrival to exit) and ``group`` (the
    group's name; None for the default group): the rank that waited least arrived last.

    Args:
        group: A ``torch.distributed`` process group; None: the default group.
    """
    dist = sys.modules.get("torch.distributed")
    arrived_s = time.monotonic()
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier(group)
    active = _recorder.active
    if active is not None:
        wait_s = time.monotonic() - arrived_s
        active.write("barrier", {"wait_s": wait_s, "group": _group_name(group)})


def mark(event: str, **fields: JsonValue) -> None:
    """Record an event of your own, with its fields: ``mark("lr_drop", lr=1e-4)``.

    Raises:
        ValueError: ``event`` is one of rtk's own (``RESERVED_EVENTS``), or a field's
            name is a key every record has (``RECORD_KEYS``).
        TypeError: A field's value is not a JSON value.
    """
    if event in RESERVED_EVENTS:
        raise ValueError(
            f"mark({event!r}): {event} is one of rtk's own events; use "
            "step/phase/barrier for it, or give your event another name"
        )
    for key, value in fields.items():
        if key in RECORD_KEYS:
            raise ValueError(f"mark({event!r}, {key}=...): {key} is a key every record has")
        if not isinstance(value, _JSON_TYPES):
            raise TypeError(f"mark({event!r}, {key}=...): {type(value).__name__} is not JSON")
    active = _recorder.active
    if active is not None:
        active.write(event, fields)


def set_steps_from(source: str) -> None:
    """Say how this process's steps are found, for ``run_start`` (framework callbacks).

    One of ``api``, ``auto``, ``hf``, ``lightning``, ``ray_train``, ``rtk``. It must be
    called before the first marker is written; later calls are ignored.

    Raises:
        ValueError: ``source`` is not one of those.
    """
    _recorder.check_steps_from(source)
    active = _recorder.active
    if active is not None:
        active.set_steps_from(source)


def _step_fields(
    tokens: int | None, samples: int | None, loss: float | None
) -> dict[str, JsonValue]:
    fields: dict[str, JsonValue] = {}
    if tokens is not None:
        fields["tokens"] = int(tokens)
    if samples is not None:
        fields["samples"] = int(samples)
    if loss is not None:
        fields["loss"] = float(loss)
    return fields


def _group_name(group: object) -> str | None:
    if group is None or isinstance(group, str):
        return group
    name = getattr(group, "group_name", None)
    return name if isinstance(name, str) and name else type(group).__name__
