"""GPU power limits and locked clocks through NVML: recorded first, always restorable.

Runs on a node with only the standard library and ``pynvml`` (nvidia-ml-py): rtk feeds
this file to ``python -`` over its transport, like ``toolkit/node/facts.py``::

    python - read    [--node NAME] [--restore-file PATH]
    python - apply   --restore-file PATH [--node NAME] [--power-limit-w W]
                     [--gpu-clocks-mhz MIN,MAX] [--mem-clocks-mhz MIN,MAX]
    python - restore --restore-file PATH [--node NAME]
    python - set-limits --restore-file PATH --owner RUN --limits INDEX=W[,INDEX=W...]
                     [--node NAME]

Each prints one JSON line, ``{"ok": true, "command": ..., "node": ..., "result": {...}}``,
and exits 0; or ``{"error": "...", "result": {...}}`` and exits 3 (``{"error": "usage:
..."}`` and 2 for arguments it cannot parse), like every node script (``common.run_main``).

``apply`` checks every request against every GPU before it changes anything, then
writes what it is about to change and the values to put back (the restore file: JSON,
mode 0600, written atomically, refused when one is already there) and only then calls
NVML's setters. When a setter fails (NoPermission when not root, NotSupported, ...) it
puts back what it had changed and fails with a message naming the node and the GPU.
``restore`` puts back what the restore file names on every GPU it can, and removes the
file once everything is back; without a file it has nothing to do (and needs no NVML).

``set-limits`` (``set_power_limits``) is the online power policies' form: a limit per
GPU, set again and again during one run (``--owner``: the run's id). Its first call on
a node writes the restore file like ``apply`` (power limits only, with the owner); later
calls of the same owner only set; a file of another owner is refused. A GPU that
refuses does not stop the others. ``read_power`` reads every GPU's energy counter and
limits for them (``toolkit/power/node_power.py`` calls both in a Ray task).

NVML has no getter for locked clocks, so ``read`` cannot say whether someone else
locked them; ``restore`` resets the clocks that rtk locked, which unlocks them.

Tests may set ``RTK_FAKE_NVML=FILE.py:FUNCTION`` to use ``FUNCTION()`` from that file
in place of ``pynvml``; it is honoured only under pytest (``PYTEST_CURRENT_TEST`` set).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from toolkit.node.common import ScriptError, UsageError, as_text, run_main

RESTORE_VERSION = 1
FAKE_NVML_ENV = "RTK_FAKE_NVML"
POWER_LIMIT = "power_limit"
GPU_CLOCKS = "gpu_clocks"
MEM_CLOCKS = "mem_clocks"

# What each change is called in messages, the sweep key that asks for it, and the
# nvidia-smi option that needs the same privilege.
_WHAT = {
    POWER_LIMIT: ("setting the power limit", "power_limit_w", "nvidia-smi -pl"),
    GPU_CLOCKS: ("locking the GPU clocks", "gpu_clocks_mhz", "nvidia-smi -lgc"),
    MEM_CLOCKS: ("locking the memory clocks", "mem_clocks_mhz", "nvidia-smi -lmc"),
}


class ControlError(ScriptError):
    """A change was refused or failed, or a restore did not put everything back.

    Attributes:
        result: What was done before the failure (restored GPUs, errors per GPU).
    """


# -- NVML ---------------------------------------------------------------------------


def load_nvml() -> Any:
    """``pynvml``, or the test fake named by ``RTK_FAKE_NVML`` (only under pytest).

    Raises:
        ControlError: pynvml does not import, or the fake was asked for outside a test.
    """
    fake = os.environ.get(FAKE_NVML_ENV)
    if fake:
        if not os.environ.get("PYTEST_CURRENT_TEST"):
            raise ControlError(f"{FAKE_NVML_ENV} is set but is only honoured under pytest")
        path, _, factory = fake.rpartition(":")
        spec = importlib.util.spec_from_file_location("rtk_fake_nvml", path)
        if spec is None or spec.loader is None:
            raise ControlError(f"{FAKE_NVML_ENV}: cannot load {path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return getattr(module, factory)()
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise ControlError(f"pynvml (nvidia-ml-py) does not import: {e}") from e


@contextlib.contextmanager
def nvml_session(nvml: Any, node: str) -> Iterator[None]:
    """``nvmlInit`` for the block, ``nvmlShutdown`` after (NVML counts nested sessions).

    Raises:
        ControlError: NVML does not start (no driver, no GPU, a broken library).
    """
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError; OSError from a broken library
        raise ControlError(f"NVML does not start on {node}: {e}") from e
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # nothing to do about a failed shutdown
            nvml.nvmlShutdown()


def _code(error: BaseException) -> Any:
    return getattr(error, "value", None)


def _gpus(nvml: Any) -> list[tuple[int, str, Any]]:
    """``(index, uuid, handle)`` for every GPU NVML sees."""
    found = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        found.append((index, as_text(nvml.nvmlDeviceGetUUID(handle)), handle))
    return found


def _optional(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None when NVML says not supported / not permitted / no such call."""
    quiet = {
        getattr(nvml, name, None)
        for name in (
            "NVML_ERROR_NOT_SUPPORTED",
            "NVML_ERROR_NO_PERMISSION",
            "NVML_ERROR_FUNCTION_NOT_FOUND",
        )
    }
    try:
        return fn(*args)
    except nvml.NVMLError as e:
        if _code(e) in quiet:
            return None
        raise


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


# -- read -----------------------------------------------------------------------------


def read_settings(
    nvml: Any, restore_file: str | None = None, *, node: str | None = None
) -> dict[str, Any]:
    """Every GPU's power limits, clocks and persistence mode, keyed by UUID.

    Per GPU: ``power_limit_w`` (the management limit that ``apply`` sets),
    ``default_power_limit_w``, ``enforced_power_limit_w``, ``power_limit_min_w`` and
    ``power_limit_max_w``, ``sm_clock_mhz``/``mem_clock_mhz`` (now) and their maxima,
    ``clocks_event_reasons``, ``persistence_mode``; a value NVML does not give is None.
    With ``restore_file``, ``pending_restore`` lists what rtk changed and has not put
    back yet (NVML itself cannot say whether clocks are locked).

    Raises:
        ControlError: NVML does not start, or fails on a GPU.
    """
    node = node or socket.gethostname()
    record = _read_record(restore_file) if restore_file else None
    pending = (record or {}).get("gpus", {})
    gpus: dict[str, dict[str, Any]] = {}
    with nvml_session(nvml, node):
        try:
            for index, uuid, handle in _gpus(nvml):
                gpus[uuid] = _gpu_settings(nvml, index, handle)
                if pending:
                    gpus[uuid]["pending_restore"] = pending.get(uuid, {}).get("changes", [])
        except nvml.NVMLError as e:
            raise ControlError(f"NVML failed reading the GPUs of {node}: {e}") from e
    return {"node": node, "gpus": gpus}


def _gpu_settings(nvml: Any, index: int, handle: Any) -> dict[str, Any]:
    limits = _optional(nvml, nvml.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    persistence = _optional(nvml, nvml.nvmlDeviceGetPersistenceMode, handle)
    clock_sm, clock_mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    name = _optional(nvml, nvml.nvmlDeviceGetName, handle)
    return {
        "index": index,
        "name": None if name is None else as_text(name),
        "power_limit_w": _watts(_optional(nvml, nvml.nvmlDeviceGetPowerManagementLimit, handle)),
        "default_power_limit_w": _watts(
            _optional(nvml, nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
        ),
        "enforced_power_limit_w": _watts(
            _optional(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        ),
        "power_limit_min_w": None if limits is None else _watts(limits[0]),
        "power_limit_max_w": None if limits is None else _watts(limits[1]),
        "sm_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetClockInfo, handle, clock_sm),
        "mem_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetClockInfo, handle, clock_mem),
        "max_sm_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, clock_sm),
        "max_mem_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, clock_mem),
        "clocks_event_reasons": _optional(
            nvml, nvml.nvmlDeviceGetCurrentClocksEventReasons, handle
        ),
        "persistence_mode": (
            None if persistence is None else persistence == nvml.NVML_FEATURE_ENABLED
        ),
    }


# -- apply ----------------------------------------------------------------------------


def apply(
    nvml: Any,
    power_limit_w: float | None,
    gpu_clocks_mhz: tuple[int, int] | None,
    mem_clocks_mhz: tuple[int, int] | None,
    restore_file: str,
    *,
    node: str | None = None,
) -> dict[str, Any]:
    """Set the power limit and lock clocks on every GPU; record what to put back first.

    Args:
        nvml: The ``pynvml`` module or an object shaped like it.
        power_limit_w: Power limit for every GPU in watts, None to leave it.
        gpu_clocks_mhz: ``(min, max)`` SM clock lock in MHz, None to leave the clocks.
        mem_clocks_mhz: ``(min, max)`` memory clock lock in MHz, None to leave them.
        restore_file: Where the previous state is written before anything changes.
        node: The node's name for messages (default: the host name).

    Returns:
        ``{"node", "restore_file", "gpus": {uuid: what was set and the previous limit},
        "warnings": [...]}``; ``gpus`` is empty when nothing was asked.

    Raises:
        ControlError: A value is out of range, a restore file is already there, or a
            setter failed (what was changed has been put back; ``result`` says so).
    """
    node = node or socket.gethostname()
    asked: dict[str, Any] = {
        POWER_LIMIT: power_limit_w,
        GPU_CLOCKS: gpu_clocks_mhz,
        MEM_CLOCKS: mem_clocks_mhz,
    }
    changes = [kind for kind, value in asked.items() if value is not None]
    result: dict[str, Any] = {"node": node, "restore_file": restore_file, "gpus": {}}
    result["warnings"] = []
    if not changes:
        return result
    for kind in (GPU_CLOCKS, MEM_CLOCKS):
        pair = asked[kind]
        if pair is not None and not 0 < pair[0] <= pair[1]:
            raise ControlError(
                f"{_WHAT[kind][1]}={list(pair)} on {node}: give MIN,MAX with 0 < MIN <= MAX"
            )
    if os.path.lexists(restore_file):
        raise ControlError(
            f"GPU settings from an earlier run are still in place on {node} ({restore_file}):"
            " put them back with `rtk profile --restore` first"
        )
    with nvml_session(nvml, node):
        try:
            gpus = _gpus(nvml)
            record = _plan(nvml, gpus, node, asked, changes, result)
        except nvml.NVMLError as e:
            raise ControlError(f"NVML failed reading the GPUs of {node}: {e}") from e
        if not gpus:
            raise ControlError(f"NVML sees no GPU on {node}: nothing to set")
        try:
            _write_record(restore_file, record)
        except OSError as e:
            message = f"cannot write {restore_file} on {node}: {e}; nothing changed"
            raise ControlError(message) from e
        done: list[tuple[str, Any, str]] = []  # (uuid, handle, kind), in order
        for index, uuid, handle in gpus:
            for kind in changes:
                try:
                    _set(nvml, handle, kind, asked[kind])
                except BaseException as e:  # NVMLError, or an interrupt: undo, then fail
                    result["restored"] = undone = _undo(nvml, done, record, restore_file)
                    if not isinstance(e, nvml.NVMLError):
                        raise
                    message = _refusal(nvml, e, kind, node, uuid, index)
                    if undone["errors"]:
                        failed = ", ".join(f"{k}: {v}" for k, v in undone["errors"].items())
                        message += (
                            f"; could not put back {failed}: {restore_file} is kept,"
                            " retry with `rtk profile --restore`"
                        )
                    raise ControlError(message, result) from e
                done.append((uuid, handle, kind))
    return result


def _plan(
    nvml: Any,
    gpus: list[tuple[int, str, Any]],
    node: str,
    asked: dict[str, Any],
    changes: list[str],
    result: dict[str, Any],
) -> dict[str, Any]:
    """Check every request on every GPU; the restore record; fill ``result["gpus"]``."""
    record: dict[str, Any] = {
        "version": RESTORE_VERSION,
        "node": node,
        "created_wall_s": time.time(),
        "gpus": {},
    }
    for index, uuid, handle in gpus:
        entry: dict[str, Any] = {"index": index, "changes": changes}
        applied: dict[str, Any] = {"index": index}
        if asked[POWER_LIMIT] is not None:
            limit_w = float(asked[POWER_LIMIT])
            low_mw, high_mw = _limits(nvml, handle, node, uuid, index)
            if not low_mw <= limit_w * 1000 <= high_mw:
                raise ControlError(
                    f"power_limit_w={limit_w:g} is outside the range of GPU {index}"
                    f" ({uuid}) on {node}: {low_mw / 1000:g}..{high_mw / 1000:g} W"
                )
            previous_mw = int(nvml.nvmlDeviceGetPowerManagementLimit(handle))
            entry["power_limit_mw"] = previous_mw
            applied["power_limit_w"] = limit_w
            applied["previous_power_limit_w"] = previous_mw / 1000.0
        for kind, clock in ((GPU_CLOCKS, nvml.NVML_CLOCK_SM), (MEM_CLOCKS, nvml.NVML_CLOCK_MEM)):
            pair = asked[kind]
            if pair is None:
                continue
            top = _optional(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, clock)
            if top is not None and pair[1] > top:
                raise ControlError(
                    f"{_WHAT[kind][1]}={list(pair)} is above the maximum of GPU {index}"
                    f" ({uuid}) on {node}: {top} MHz"
                )
            applied[f"{kind}_mhz"] = [int(pair[0]), int(pair[1])]
        persistence = _optional(nvml, nvml.nvmlDeviceGetPersistenceMode, handle)
        if persistence is not None and persistence != nvml.NVML_FEATURE_ENABLED:
            result["warnings"].append(
                f"persistence mode is off on GPU {index} ({uuid}) on {node}: the driver may"
                " drop these settings when no process holds the GPU (nvidia-smi -pm 1)"
            )
        record["gpus"][uuid] = entry
        result["gpus"][uuid] = applied
    return record


def _limits(nvml: Any, handle: Any, node: str, uuid: str, index: int) -> tuple[int, int]:
    try:
        low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    except nvml.NVMLError as e:
        if _code(e) in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            raise ControlError(
                f"GPU {index} ({uuid}) on {node} has no settable power limit ({e});"
                " drop power_limit_w from the sweep"
            ) from e
        raise
    return int(low), int(high)


def _set(nvml: Any, handle: Any, kind: str, value: Any) -> None:
    if kind == POWER_LIMIT:
        nvml.nvmlDeviceSetPowerManagementLimit(handle, round(float(value) * 1000))
    elif kind == GPU_CLOCKS:
        nvml.nvmlDeviceSetGpuLockedClocks(handle, int(value[0]), int(value[1]))
    else:
        nvml.nvmlDeviceSetMemoryLockedClocks(handle, int(value[0]), int(value[1]))


def _put_back(nvml: Any, handle: Any, kind: str, entry: dict[str, Any]) -> None:
    if kind == POWER_LIMIT:
        nvml.nvmlDeviceSetPowerManagementLimit(handle, int(entry["power_limit_mw"]))
    elif kind == GPU_CLOCKS:
        nvml.nvmlDeviceResetGpuLockedClocks(handle)
    else:
        nvml.nvmlDeviceResetMemoryLockedClocks(handle)


def _refusal(
    nvml: Any,
    error: Exception,
    kind: str,
    node: str,
    uuid: str,
    index: int,
    drop: str | None = None,
) -> str:
    """One line: why NVML refused ``kind`` on a GPU; ``drop`` what to leave out instead."""
    what, key, tool = _WHAT[kind]
    drop = drop or f"{key} from the sweep"
    code = _code(error)
    if code == nvml.NVML_ERROR_NO_PERMISSION:
        return f"{what} needs root on {node} ({tool} needs it too); run rtk as root or drop {drop}"
    if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
        return f"GPU {index} ({uuid}) on {node} does not support {what} ({error}); drop {drop}"
    return f"{what} failed on GPU {index} ({uuid}) on {node}: {error}"


def _undo(
    nvml: Any, done: list[tuple[str, Any, str]], record: dict[str, Any], restore_file: str
) -> dict[str, Any]:
    """Put back what ``apply`` changed, newest first; drop the file when all went back."""
    restored: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for uuid, handle, kind in reversed(done):
        try:
            _put_back(nvml, handle, kind, record["gpus"][uuid])
            restored.setdefault(uuid, []).append(kind)
        except nvml.NVMLError as e:
            errors[f"{uuid} {kind}"] = str(e)
    if not errors:
        _remove(restore_file)
    return {"gpus": restored, "errors": errors, "restore_file_removed": not errors}


# -- power limits per GPU, again and again (the online power policies) ----------------

POLICY_DROP = "--power-policy"  # what a refusal says to leave out instead (``_refusal``)


def set_power_limits(
    nvml: Any,
    limits_w: Mapping[int, float],
    restore_file: str,
    owner: str,
    *,
    node: str | None = None,
) -> dict[str, Any]:
    """Set each asked GPU's power limit (NVML index -> watts), as often as a run likes.

    The first call of a run (``owner``: its id) on a node writes the restore file as
    ``apply`` does, with every GPU's limit before it and ``owner`` added; later calls of
    the same owner only set. A GPU that refuses (a limit outside its range, NoPermission,
    NotSupported, any NVML error) is one line in ``errors`` and the others are set all
    the same. When a first call set nothing, its file is removed again: nothing changed.
    Nothing asked: nothing done, and the restore file is not touched.

    Returns:
        ``{"node", "restore_file", "owner", "set": {index: watts}, "errors": {index:
        line}, "recorded": bool}``; ``recorded``: this call wrote the restore file.

    Raises:
        ControlError: A restore file of another owner is there (an earlier run's, or
            ``rtk profile``'s), it cannot be read or written, or NVML does not start or
            fails reading the GPUs.
    """
    node = node or socket.gethostname()
    result: dict[str, Any] = {"node": node, "restore_file": restore_file, "owner": owner}
    result.update({"set": {}, "errors": {}, "recorded": False})
    if not limits_w:
        return result
    record = _read_record(restore_file)
    if record is not None and record.get("owner") != owner:
        raise ControlError(
            f"GPU settings of an earlier run are still in place on {node} ({restore_file}):"
            " put them back with `rtk profile --restore` (or `rtk down`, then `rtk up`)"
        )
    with nvml_session(nvml, node):
        try:
            gpus = {index: (uuid, handle) for index, uuid, handle in _gpus(nvml)}
            if record is None and gpus:
                record = _limits_record(nvml, gpus, node, owner)
                try:
                    _write_record(restore_file, record)
                except OSError as e:
                    message = f"cannot write {restore_file} on {node}: {e}; nothing changed"
                    raise ControlError(message) from e
                result["recorded"] = True
        except nvml.NVMLError as e:
            raise ControlError(f"NVML failed reading the GPUs of {node}: {e}") from e
        recorded = (record or {}).get("gpus", {})
        for index, watts in sorted(limits_w.items()):
            if index not in gpus:
                result["errors"][index] = f"{node} has no GPU {index} (NVML sees {len(gpus)})"
                continue
            uuid, handle = gpus[index]
            if uuid not in recorded:
                result["errors"][index] = (
                    f"GPU {index} ({uuid}) on {node} is not in {restore_file}; not setting it"
                )
                continue
            line = _set_one(nvml, handle, float(watts), node, uuid, index)
            if line is None:
                result["set"][index] = float(watts)
            else:
                result["errors"][index] = line
    if result["recorded"] and not result["set"]:
        _remove(restore_file)  # nothing changed: nothing to put back
        result["recorded"] = False
    return result


def _limits_record(
    nvml: Any, gpus: Mapping[int, tuple[str, Any]], node: str, owner: str
) -> dict[str, Any]:
    """The restore record of every GPU's power limit now, for ``owner``."""
    record: dict[str, Any] = {
        "version": RESTORE_VERSION,
        "node": node,
        "owner": owner,
        "created_wall_s": time.time(),
        "gpus": {},
    }
    for index, (uuid, handle) in sorted(gpus.items()):
        previous_mw = _optional(nvml, nvml.nvmlDeviceGetPowerManagementLimit, handle)
        if previous_mw is not None:
            record["gpus"][uuid] = {
                "index": index,
                "changes": [POWER_LIMIT],
                "power_limit_mw": int(previous_mw),
            }
    return record


def _set_one(nvml: Any, handle: Any, watts: float, node: str, uuid: str, index: int) -> str | None:
    """Set one GPU's limit; None when it took, else the line that says why not."""
    try:
        low_mw, high_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        if not low_mw <= watts * 1000 <= high_mw:
            return (
                f"power limit {watts:g} W is outside the range of GPU {index} ({uuid}) on"
                f" {node}: {low_mw / 1000:g}..{high_mw / 1000:g} W; not set"
            )
        _set(nvml, handle, POWER_LIMIT, watts)
    except nvml.NVMLError as e:
        return _refusal(nvml, e, POWER_LIMIT, node, uuid, index, drop=POLICY_DROP)
    return None


def read_power(nvml: Any, *, node: str | None = None) -> dict[str, Any]:
    """Every GPU's energy counter and power limits, in index order.

    Per GPU: ``index``, ``uuid``, ``energy_mj`` (NVML's total energy counter, mJ since
    the driver loaded), ``limit_w`` (the management limit), ``min_w``/``max_w`` (its
    constraints) and ``default_w``; a value NVML does not give is None.

    Raises:
        ControlError: NVML does not start, or fails on a GPU.
    """
    node = node or socket.gethostname()
    rows: list[dict[str, Any]] = []
    with nvml_session(nvml, node):
        try:
            for index, uuid, handle in _gpus(nvml):
                limits = _optional(nvml, nvml.nvmlDeviceGetPowerManagementLimitConstraints, handle)
                energy = _optional(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
                rows.append(
                    {
                        "index": index,
                        "uuid": uuid,
                        "energy_mj": None if energy is None else int(energy),
                        "limit_w": _watts(
                            _optional(nvml, nvml.nvmlDeviceGetPowerManagementLimit, handle)
                        ),
                        "min_w": None if limits is None else _watts(limits[0]),
                        "max_w": None if limits is None else _watts(limits[1]),
                        "default_w": _watts(
                            _optional(nvml, nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
                        ),
                    }
                )
        except nvml.NVMLError as e:
            raise ControlError(f"NVML failed reading the GPUs of {node}: {e}") from e
    return {"node": node, "gpus": rows}


# -- restore --------------------------------------------------------------------------


def restore(nvml: Any, restore_file: str, *, node: str | None = None) -> dict[str, Any]:
    """Put back everything the restore file names; remove the file once all is back.

    Without a file there is nothing to do (and NVML is not touched). A GPU that fails
    does not stop the others.

    Args:
        nvml: The ``pynvml`` module or an object shaped like it; None loads it
            (``load_nvml``) only when there is something to restore.
        restore_file: The file ``apply`` wrote.
        node: The node's name for messages (default: the host name).

    Returns:
        ``{"node", "restore_file", "gpus": {uuid: {kind: "restored"}}, "errors": {}}``.

    Raises:
        ControlError: Something could not be put back (the file stays for a retry;
            ``result`` has what was and was not restored).
    """
    node = node or socket.gethostname()
    result: dict[str, Any] = {"node": node, "restore_file": restore_file, "gpus": {}}
    result["errors"] = {}
    record = _read_record(restore_file)
    if record is None:
        result["nothing_to_do"] = True
        return result
    if nvml is None:
        nvml = load_nvml()
    with nvml_session(nvml, node):
        for uuid, entry in record.get("gpus", {}).items():
            done: dict[str, str] = {}
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except nvml.NVMLError as e:
                result["errors"][uuid] = f"no such GPU now: {e}"
                continue
            for kind in entry.get("changes", []):
                try:
                    _put_back(nvml, handle, kind, entry)
                    done[kind] = "restored"
                except nvml.NVMLError as e:
                    result["errors"][f"{uuid} {kind}"] = str(e)
            result["gpus"][uuid] = done
    if result["errors"]:
        failed = ", ".join(f"{k}: {v}" for k, v in result["errors"].items())
        raise ControlError(
            f"could not put back every GPU setting on {node} ({failed}); {restore_file} is"
            " kept: retry with `rtk profile --restore`",
            result,
        )
    _remove(restore_file)
    return result


# -- the restore file -----------------------------------------------------------------


def _write_record(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` to ``path`` (0600) atomically; refuse when ``path`` exists."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".gpu-restore.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temp, path)  # atomic, and fails when another run left a file there
        except FileExistsError as e:
            raise ControlError(f"{path} appeared meanwhile: is another rtk run here?") from e
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def _read_record(path: str) -> dict[str, Any] | None:
    """The restore file's record, or None when there is none.

    Raises:
        ControlError: It is not a regular file of this user (or root) that only its
            owner may write, or it is not a restore record.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise ControlError(f"{path} is not a regular file; not reading it")
    if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
        raise ControlError(f"{path} is not this user's or is writable by others; not reading it")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ControlError(f"cannot read {path}: {e}") from e
    if not isinstance(record, dict) or record.get("version") != RESTORE_VERSION:
        raise ControlError(f"{path} is not a version {RESTORE_VERSION} GPU restore record")
    return record


def record_owner(path: str) -> tuple[bool, str | None]:
    """Whether a restore file is at ``path``, and its owner (None: ``apply``'s, no owner).

    Raises:
        ControlError: It cannot be trusted or read (``_read_record``).
    """
    record = _read_record(path)
    return record is not None, None if record is None else record.get("owner")


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- the node script ------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _pair(text: str) -> tuple[int, int]:
    low, _, high = text.partition(",")
    try:
        return int(low), int(high or low)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN,MAX in MHz") from e


def _limit_list(text: str) -> dict[int, float]:
    """``INDEX=W,INDEX=W`` (``0=450,1=500``): a power limit per GPU index."""
    limits: dict[int, float] = {}
    for item in filter(None, text.split(",")):
        index, _, watts = item.partition("=")
        try:
            limits[int(index)] = float(watts)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{item!r} is not INDEX=WATTS") from e
    return limits


def _parser() -> _Parser:
    parser = _Parser(prog="python - (rtk gpu control)")
    parser.add_argument("command", choices=("read", "apply", "restore", "set-limits"))
    parser.add_argument("--node", default=None)
    parser.add_argument("--restore-file", default=None)
    parser.add_argument("--power-limit-w", type=float, default=None)
    parser.add_argument("--gpu-clocks-mhz", type=_pair, default=None)
    parser.add_argument("--mem-clocks-mhz", type=_pair, default=None)
    parser.add_argument("--owner", default=None)
    parser.add_argument("--limits", type=_limit_list, default=None)
    return parser


def main(argv: list[str], nvml: Any = None) -> int:
    """Run one command; print one JSON line; 0 when it worked, 3 when not, 2 on bad usage.

    ``nvml`` is the module to use (tests pass a fake); None loads it (``load_nvml``)
    when the command needs it.
    """
    return run_main(lambda: _answer(argv, nvml))


def _answer(argv: list[str], nvml: Any) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    node = args.node or socket.gethostname()
    if args.command != "read" and not args.restore_file:
        raise UsageError(f"{args.command} needs --restore-file")
    if args.command == "restore":
        result = restore(nvml, args.restore_file, node=node)
    elif args.command == "set-limits":
        if not args.owner or args.limits is None:
            raise UsageError("set-limits needs --owner and --limits INDEX=W,...")
        result = set_power_limits(
            nvml or load_nvml(), args.limits, args.restore_file, args.owner, node=node
        )
    elif args.command == "apply":
        result = apply(
            nvml or load_nvml(),
            args.power_limit_w,
            args.gpu_clocks_mhz,
            args.mem_clocks_mhz,
            args.restore_file,
            node=node,
        )
    else:
        result = read_settings(nvml or load_nvml(), args.restore_file, node=node)
    return {"ok": True, "command": args.command, "node": node, "result": result}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
