"""One node's side of the online power policies: set its GPUs' limits, read their energy.

Runs on the node, in a Ray task the job driver pins there (``toolkit.ray_fanout``),
every few seconds during a run, and once more at its end. Plain functions over
``toolkit.node.gpu_control`` (the node script that ``rtk profile`` also runs), so the
restore file is the very one ``rtk profile --restore`` and the next ``rtk up`` repair:
``$RTK_CLUSTER_DIR/rtk/gpu-restore.json``. Each call opens NVML and shuts it down
again; a node without NVML (no driver, no ``pynvml``) answers ``nvml=False`` and no
GPUs, never an exception.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.gpu.limits import GpuRestore, restored_lines
from toolkit.node import gpu_control
from toolkit.node.common import GPU_RESTORE_FILE


@dataclass(frozen=True)
class GpuReading:
    """One GPU's energy counter and power limits, read once.

    Attributes:
        index: Its NVML index on the node.
        uuid: Its UUID.
        energy_mj: NVML's total energy counter, mJ since the driver loaded (None: the
            GPU has none).
        limit_w: Its power limit now (None: NVML does not say).
        min_w: The least limit it takes (None: no settable limit).
        max_w: The most it takes.
        default_w: Its default limit.
    """

    index: int
    uuid: str
    energy_mj: int | None
    limit_w: float | None
    min_w: float | None
    max_w: float | None
    default_w: float | None


@dataclass(frozen=True)
class NodePower:
    """What one call did on a node: the limits it set, then every GPU read.

    Attributes:
        node: The node's inventory name.
        wall_s: When the GPUs were read (``time.time()`` on the node, amid the reads).
        gpus: Every GPU, in index order (none without NVML).
        errors: One line per thing that failed: a GPU that refused its limit, a restore
            file of another run, NVML failing; without NVML, why (no ``pynvml``, no
            driver).
        nvml: Whether NVML answered on the node.
    """

    node: str
    wall_s: float
    gpus: tuple[GpuReading, ...]
    errors: tuple[str, ...]
    nvml: bool


def default_restore_file() -> str:
    """``<the cluster's temp dir>/rtk/gpu-restore.json``.

    The cluster's temp dir is ``RTK_CLUSTER_DIR`` (rtk sets it for every Ray process it
    starts), else Ray's temp dir, else the system's.
    """
    base = os.environ.get("RTK_CLUSTER_DIR")
    if not base:
        try:
            import ray  # only here: this module is plain Python otherwise

            base = ray.get_runtime_context().get_temp_dir()
        except Exception:  # noqa: BLE001 - no Ray, or not in a Ray worker
            base = tempfile.gettempdir()
    return os.path.join(base, GPU_RESTORE_FILE)


def node_power(
    node: str,
    owner: str,
    limits_w: Mapping[int, float] | None,
    restore_file: str | None = None,
    nvml: Any = None,
) -> NodePower:
    """Set ``limits_w`` (GPU index -> watts) on this node's GPUs, then read every GPU.

    The first limits a run (``owner``: its id) sets on the node record every GPU's
    limit before them in the restore file; later calls only set. Nothing asked (None
    or empty): nothing set, no restore file touched.

    Args:
        node: The node's inventory name (for the lines in ``errors``).
        owner: The run's id, written into the restore file.
        limits_w: The limits to set, by GPU index; None or empty for none.
        restore_file: Where the limits to put back are kept (``default_restore_file``).
        nvml: ``pynvml`` or an object shaped like it; None loads it
            (``gpu_control.load_nvml``).
    """
    errors: list[str] = []
    nvml = nvml if nvml is not None else _load(errors)
    if nvml is None:
        return NodePower(node, time.time(), (), tuple(errors), nvml=False)
    try:
        with gpu_control.nvml_session(nvml, node):
            if limits_w:
                path = restore_file or default_restore_file()
                try:
                    done = gpu_control.set_power_limits(nvml, limits_w, path, owner, node=node)
                    _add(errors, done["errors"].values())
                except gpu_control.ControlError as e:
                    errors.append(str(e))
            began_s = time.time()
            try:
                rows = gpu_control.read_power(nvml, node=node)["gpus"]
            except gpu_control.ControlError as e:
                errors.append(str(e))
                rows = []
            wall_s = (began_s + time.time()) / 2
    except gpu_control.ControlError as e:  # NVML does not start here
        errors.append(str(e))
        return NodePower(node, time.time(), (), tuple(errors), nvml=False)
    gpus = tuple(GpuReading(**row) for row in rows)
    return NodePower(node, wall_s, gpus, tuple(errors), nvml=True)


def node_restore(
    node: str, restore_file: str | None = None, nvml: Any = None, owner: str | None = None
) -> GpuRestore:
    """Put back what the restore file names on this node.

    No file: nothing to do, no line, and NVML is not loaded. A GPU that fails does not
    stop the others; the file stays until everything is back. With ``owner`` (the
    run's id), a file another run or ``rtk profile`` wrote is left as it is (one line
    says so): a run whose limits were refused must not undo another's.
    """
    path = restore_file or default_restore_file()
    try:
        if owner is not None:
            there, written_by = gpu_control.record_owner(path)
            if not there:
                return GpuRestore(node)
            if written_by != owner:
                left = f"{node}: left {path} as it is: {written_by or 'rtk profile'} wrote it"
                return GpuRestore(node, left=left)
        done = gpu_control.restore(nvml, path, node=node)
    except gpu_control.ControlError as e:
        done = e.result
        failed: str | None = f"{node}: {e}"
    else:
        failed = None
    if done.get("nothing_to_do"):
        return GpuRestore(node)
    return GpuRestore(node, restored_lines(node, done.get("gpus", {})), failed)


def _load(errors: list[str]) -> Any:
    """``pynvml`` (or the test fake); None, with why in ``errors``, when it does not load."""
    try:
        return gpu_control.load_nvml()
    except gpu_control.ControlError as e:
        errors.append(str(e))
        return None


def _add(errors: list[str], lines: Iterable[str]) -> None:
    """Append each line once: NoPermission reads the same for every GPU of a node."""
    for line in lines:
        if line not in errors:
            errors.append(line)
