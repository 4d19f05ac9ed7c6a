"""Set GPU power limits and clock locks on every GPU node for a block, then put them back.

rtk's side of the node script ``toolkit/node/gpu_control.py``: ``gpu_settings`` applies on
every node with GPUs in parallel and restores on every node where it applied (even partly),
whether the block ends normally, with an exception, or with Ctrl-C. While it restores,
a Ctrl-C is held back until the restore is done (then raised). Each node keeps what
to put back in a restore file (``restore_file(plan)``) before changing anything, so
``SshGpuLimits.restore`` (``rtk profile --restore``, ``rtk up``) repairs a node after a
crash: the SSH path of the one GPU-limit interface, ``gpu.limits``.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.errors import GpuControlError
from toolkit.fields import Fields
from toolkit.gpu.limits import GpuRestore, restored_lines
from toolkit.nodeinfo import NodeScript
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.rundir.gpu_settings import NodeGpuSettings
from toolkit.transport.base import Transport
from toolkit.transport.group import GroupResult, run_each

logger = logging.getLogger(__name__)

RESTORE_FILE_NAME = "gpu-restore.json"
CONTROL_TIMEOUT_S = 60.0


CONTROL = NodeScript("toolkit.node", "gpu_control.py", GpuControlError, ok_key="ok")
"""The node script ``gpu_control.py``: success is ``{"ok": true, "result": {...}}``."""


def control_source() -> str:
    """The text ``gpu_control.py`` is sent as."""
    return CONTROL.source()


def restore_file(plan: ClusterPlan) -> str:
    """Where every node keeps what to put back: ``<temp_dir>/rtk/gpu-restore.json``."""
    return posixpath.join(plan.paths.rtk_dir, RESTORE_FILE_NAME)


def control_command(
    node_plan: NodePlan,
    command: str,
    restore_path: str,
    power_limit_w: float | None = None,
    gpu_clocks_mhz: tuple[int, int] | None = None,
    mem_clocks_mhz: tuple[int, int] | None = None,
) -> str:
    """The command line that runs ``gpu_control.py COMMAND`` (fed on stdin) on a node."""
    node = node_plan.node
    argv = [command, "--node", node.name, "--restore-file", restore_path]
    if power_limit_w is not None:
        argv += ["--power-limit-w", f"{power_limit_w:g}"]
    if gpu_clocks_mhz is not None:
        argv += ["--gpu-clocks-mhz", f"{gpu_clocks_mhz[0]},{gpu_clocks_mhz[1]}"]
    if mem_clocks_mhz is not None:
        argv += ["--mem-clocks-mhz", f"{mem_clocks_mhz[0]},{mem_clocks_mhz[1]}"]
    return CONTROL.command(node, *argv)


def _restored(f: Fields) -> GpuRestore:
    """``gpu_control.py restore``'s ``result`` as the node's ``GpuRestore``."""
    node = f.text("node")
    gpus = {uuid: tuple(done.data) for uuid, done in f.children("gpus").items()}
    return GpuRestore(node, restored_lines(node, gpus))


def call_control(transport: Transport, node_plan: NodePlan, command: str) -> Fields:
    """Run a ``control_command`` line on its node; the ``result`` of its JSON answer.

    Raises:
        GpuControlError: The script refused, failed, or gave no answer.
        toolkit.errors.ClusterError: The answer has no ``result`` object (named with the
            node, like a malformed field read from it).
        toolkit.errors.TransportError: The node could not be reached.
    """
    name = node_plan.node.name
    answer = CONTROL.call(transport, node_plan.node, command, CONTROL_TIMEOUT_S)
    return answer_fields(name, "GPU control answer", answer).nested("result")


@contextlib.contextmanager
def gpu_settings(
    plan: ClusterPlan,
    transport: Transport,
    power_limit_w: float | None = None,
    gpu_clocks_mhz: tuple[int, int] | None = None,
    mem_clocks_mhz: tuple[int, int] | None = None,
) -> Iterator[dict[str, NodeGpuSettings]]:
    """Apply the settings on every node with GPUs for the ``with`` block; restore after.

    Yields:
        Node name -> what ``gpu_control.apply`` set there (per GPU UUID); empty when
        nothing was asked (then no node is touched).

    Raises:
        GpuControlError: Something was asked but no node has GPUs; a node refused or
            failed (every node is restored first; the message names each node and
            why); or, after a block that ended normally, a node was not restored.
    """
    asked = {
        "power_limit_w": power_limit_w,
        "gpu_clocks_mhz": gpu_clocks_mhz,
        "mem_clocks_mhz": mem_clocks_mhz,
    }
    asked = {k: v for k, v in asked.items() if v is not None}
    if not asked:
        yield {}
        return
    nodes = [n for n in plan.nodes if n.node.gpus > 0]
    if not nodes:
        shown = ", ".join(f"{k}={v}" for k, v in asked.items())
        raise GpuControlError(
            f"{shown} was asked, but no node of cluster {plan.inventory.name!r} has GPUs"
            " (gpus: in the inventory); drop it from the sweep"
        )
    path = restore_file(plan)

    def apply_on(node_plan: NodePlan) -> NodeGpuSettings:
        command = control_command(
            node_plan, "apply", path, power_limit_w, gpu_clocks_mhz, mem_clocks_mhz
        )
        return NodeGpuSettings.from_fields(call_control(transport, node_plan, command))

    try:
        applied = run_each(nodes, apply_on)
    except BaseException:  # Ctrl-C while applying: put back whatever got set
        _restore_after(transport, nodes, path, raising=False)
        raise
    if applied.failed:
        restored = _restore_after(transport, nodes, path, raising=False)
        raise GpuControlError(_apply_failure(applied, restored))
    for name, result in applied.results.items():
        for warning in result.warnings:
            logger.warning("%s: %s", name, warning)
        logger.info("GPU settings on %s: %s", name, asked)
    try:
        yield dict(applied.results)
    except BaseException:
        _restore_after(transport, nodes, path, raising=False)
        raise
    _restore_after(transport, nodes, path, raising=True)


class SshGpuLimits:
    """The SSH path to the nodes' GPU limits (``gpu.limits.GpuLimits``).

    ``nodes``: the plan's nodes to act on (None: all of them).
    """

    def __init__(
        self, plan: ClusterPlan, transport: Transport, nodes: Sequence[NodePlan] | None = None
    ) -> None:
        self.plan = plan
        self.transport = transport
        self.nodes = tuple(plan.nodes if nodes is None else nodes)

    def restore(self) -> dict[str, GpuRestore]:
        """Put back what each node's restore file names, in parallel, Ctrl-C held meanwhile.

        A node without a file has nothing to do (and needs no NVML); one that cannot be
        reached or fails says why in ``failed``.
        """
        outcome, _ = _restore(self.transport, self.nodes, restore_file(self.plan))
        failed = {
            name: GpuRestore(name, failed=_reason(name, e)) for name, e in outcome.failed.items()
        }
        return dict(outcome.results) | failed


def restore_all(plan: ClusterPlan, transport: Transport) -> dict[str, GpuRestore]:
    """Put back the GPU settings on every node that still has a restore file.

    For ``rtk profile --restore`` after a crash (``SshGpuLimits.restore``).

    Returns:
        Node name -> what was put back there.

    Raises:
        GpuControlError: A node could not be reached or not restored (named, with why);
            the other nodes are restored all the same.
    """
    done = SshGpuLimits(plan, transport).restore()
    failed = [r.failed for r in done.values() if r.failed]
    if failed:
        lines = [f"GPU settings not put back on {len(failed)} node(s)"]
        lines[0] += " (retry with `rtk profile --restore`):"
        raise GpuControlError("\n".join([*lines, *(f"  {line}" for line in failed)]))
    return done


def _restore(
    transport: Transport, nodes: Sequence[NodePlan], path: str
) -> tuple[GroupResult[GpuRestore], bool]:
    """Restore ``nodes`` in parallel with Ctrl-C held; and whether one was held."""

    def restore_on(node_plan: NodePlan) -> GpuRestore:
        command = control_command(node_plan, "restore", path)
        return _restored(call_control(transport, node_plan, command))

    with _sigint_held() as held:
        outcome = run_each(nodes, restore_on)
    return outcome, bool(held)


def _restore_after(
    transport: Transport, nodes: Sequence[NodePlan], path: str, *, raising: bool
) -> GroupResult[GpuRestore]:
    """Restore ``nodes``; log failures; raise them (and a held Ctrl-C) when ``raising``."""
    outcome, interrupted = _restore(transport, nodes, path)
    if outcome.failed:
        logger.error("%s", _restore_failure(outcome))
    if raising and interrupted:
        raise KeyboardInterrupt
    if raising and outcome.failed:
        raise GpuControlError(_restore_failure(outcome))
    return outcome


def _apply_failure(applied: GroupResult[NodeGpuSettings], restored: GroupResult[GpuRestore]) -> str:
    total = len(applied.results) + len(applied.failed)
    lines = [f"GPU settings failed on {len(applied.failed)} of {total} node(s):"]
    lines += [f"  {_reason(name, e)}" for name, e in applied.failed.items()]
    if restored.failed:
        lines.append(_restore_failure(restored))
    else:
        lines.append("every node's GPU settings are as they were before")
    return "\n".join(lines)


def _restore_failure(outcome: GroupResult[GpuRestore]) -> str:
    lines = [
        f"GPU settings not put back on {len(outcome.failed)} node(s)"
        " (retry with `rtk profile --restore`):"
    ]
    lines += [f"  {_reason(name, e)}" for name, e in outcome.failed.items()]
    return "\n".join(lines)


def _reason(name: str, error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if text.startswith(f"{name}:") else f"{name}: {text}"


@contextlib.contextmanager
def _sigint_held() -> Iterator[list[int]]:
    """Hold Ctrl-C back for the block (main thread only); yields the signals held."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)
        logger.warning("putting the GPU settings back first; Ctrl-C again once it is done")

    previous: Any = signal.signal(signal.SIGINT, hold)
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
