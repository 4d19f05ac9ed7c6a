"""One node's evidence of a stall: its ranks, their last markers, process states and stacks.

Runs on the node, in a Ray task (``toolkit.stall.collect``). The node's ranks are
found by their marker files in the run directory: those whose last marker names this
node (``RTK_NODE``: the inventory's name), or, when none does, whose last marker was
written on this host (a run directory local to each node, or nodes that Ray names
otherwise). Only a file's tail is read (``TAIL_BYTES``): a long run's marker file is
hundreds of MB. The phase a rank is in is the innermost ``phase_begin`` whose
``phase_end`` the tail does not hold (none after ``run_end``).

When the collection gives a request id, the node first asks its ranks for their
Flight Recorder's collectives (``flight.dumps``), reads the stacks meanwhile, then
gathers the answers (a rank's recent collectives go with its evidence). A node the
collection asks for NCCL's RAS view (``flight.ras``) queries it meanwhile too, where
one of its ranks has a GPU.

Stacks are read in parallel, ``STACK_WORKERS`` at a time: a node has 8 ranks
typically and 72 at most, and each read is a py-spy process (some 10 ms) or a wait
for the rank's own dump, each within ``stack_timeout_s``; 72 ranks that all time out
take three rounds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import RunDirError
from toolkit.rundir.layout import RunDir
from toolkit.rundir.markers import Marker
from toolkit.stall.flight import dumps as flight_dumps
from toolkit.stall.flight import ras as flight_ras
from toolkit.stall.proc_state import process_state
from toolkit.stall.records import GONE, STOPPED, ZOMBIE, NodeEvidence, RankEvidence
from toolkit.stall.stacks import NO_STACK, StackRead, rank_stack

TAIL_BYTES = 64 * 1024
STACK_WORKERS = 32
STACK_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class MarkerTail:
    """What the tail of a rank's marker file says.

    Attributes:
        last: The last whole marker.
        phase: The innermost phase begun and not ended within the tail (None: none).
    """

    last: Marker
    phase: str | None


def node_evidence(
    run_dir: str,
    node: str,
    stack_timeout_s: float = STACK_TIMEOUT_S,
    py_spy: bool = True,
    nvml: Any = None,
    flight_request: str | None = None,
    ras: bool = False,
) -> NodeEvidence:
    """The evidence of ``node``'s ranks, read on that node now.

    Args:
        run_dir: The run directory (as the node sees it).
        node: The node's inventory name.
        stack_timeout_s: How long one rank's stack may take.
        py_spy: Try py-spy first (False: faulthandler only).
        nvml: The NVML module to read the ranks' GPUs with (default: ``pynvml``, when
            the node has it and a rank has a GPU).
        flight_request: The collection's id: ask the ranks for their collectives
            (None: do not ask).
        ras: Ask NCCL's RAS for its view too, where a rank here has a GPU.
    """
    started_s = time.monotonic()
    layout = RunDir(os.path.expanduser(run_dir))
    if flight_request is not None:
        flight_dumps.ask(layout, flight_request)
    tails = [t for path in layout.marker_files() if (t := read_tail(path)) is not None]
    mine = ranks_on(tails, node, socket.gethostname())
    workers = max(1, min(STACK_WORKERS, len(mine)))
    with ThreadPoolExecutor(max_workers=workers + 1, thread_name_prefix="rtk-stall") as pool:
        asked = ras and any(t.last.gpu_uuid for t in mine)
        view = pool.submit(flight_ras.query_ras) if asked else None
        ranks = list(
            pool.map(lambda t: rank_evidence(layout, node, t, stack_timeout_s, py_spy), mine)
        )
    uuids = {rank.gpu for rank in ranks if rank.gpu}
    if uuids:
        readings = gpu_readings(uuids, nvml)
        ranks = [
            dataclasses.replace(rank, gpu_util_pct=got[0], power_w=got[1])
            if rank.gpu and (got := readings.get(rank.gpu))
            else rank
            for rank in ranks
        ]
    if flight_request is not None:
        # A stopped or gone rank cannot answer: waiting for it would only delay the node's.
        able = [r.rank for r in ranks if r.state not in (STOPPED, GONE, ZOMBIE)]
        deadline_s = started_s + flight_dumps.FLIGHT_WAIT_S
        answers = flight_dumps.gather(layout, able, flight_request, deadline_s)
        ranks = [
            dataclasses.replace(rank, collectives=answers[rank.rank])
            if rank.rank in answers
            else rank
            for rank in ranks
        ]
    ras_view = view.result() if view is not None else None
    return NodeEvidence(node, tuple(ranks), None, time.monotonic() - started_s, ras_view)


def gpu_readings(uuids: set[str], nvml: Any = None) -> dict[str, tuple[float, float]]:
    """Each GPU's utilisation (%) and power (W) now, by UUID; none where NVML fails.

    A stalled rank's GPU says what it does: idle (a rank that never launched its
    kernels, or waits on the host) or busy at full power (a kernel that never ends).
    """
    try:
        if nvml is None:
            nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML here: the evidence goes without it
        return {}
    found: dict[str, tuple[float, float]] = {}
    try:
        for uuid in sorted(uuids):
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
            except Exception:  # noqa: BLE001 - one GPU that does not answer is left out
                continue
            found[uuid] = (float(util), power_mw / 1000.0)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return found


def ranks_on(tails: list[MarkerTail], node: str, hostname: str) -> list[MarkerTail]:
    """The ranks whose last marker names ``node``, else those written on ``hostname``."""
    named = [t for t in tails if t.last.node == node]
    found = named or [t for t in tails if t.last.hostname == hostname]
    return sorted(found, key=lambda t: t.last.rank)


def rank_evidence(
    layout: RunDir, node: str, tail: MarkerTail, stack_timeout_s: float, py_spy: bool
) -> RankEvidence:
    """One rank's evidence: its last marker, its process's state, and its stack."""
    last = tail.last
    state = process_state(last.pid, last.mono_s)
    if state in (GONE, ZOMBIE):
        read = StackRead(source=NO_STACK, error=f"the process is {state}")
    else:
        read = rank_stack(last.pid, layout.stack_dump(last.rank), stack_timeout_s, py_spy)
    return RankEvidence(
        rank=last.rank,
        node=node,
        pid=last.pid,
        local_rank=last.local_rank,
        gpu=last.gpu_uuid,
        state=state,
        frames=read.frames,
        stack_source=read.source,
        stack_error=read.error,
        last_event=last.event,
        last_step=last.step,
        last_phase=tail.phase,
        last_wall_s=last.wall_s,
    )


def read_tail(path: Path, max_bytes: int = TAIL_BYTES) -> MarkerTail | None:
    """The last marker of the file ``path`` and the phase open there (None: no marker)."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - max_bytes))
            data = file.read(max_bytes)
    except OSError:
        return None
    return parse_tail(data, cut=size > max_bytes)


def parse_tail(data: bytes, cut: bool) -> MarkerTail | None:
    """The last marker in ``data`` and the phase open there (``cut``: its first line is partial)."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if cut:
        lines = lines[1:]
    last: Marker | None = None
    phases: list[str] = []
    for line in lines:
        marker = _marker(line)
        if marker is None:
            continue
        last = marker
        name = marker.fields.get("name")
        if marker.event in ("run_start", "run_end"):
            phases = []
        elif marker.event == "phase_begin" and isinstance(name, str):
            phases.append(name)
        elif marker.event == "phase_end" and name in phases:
            del phases[len(phases) - 1 - phases[::-1].index(name) :]
    return MarkerTail(last, phases[-1] if phases else None) if last is not None else None


def _marker(line: str) -> Marker | None:
    """One line as a marker; None for a torn or foreign line."""
    if not line.strip():
        return None
    try:
        return Marker.from_json(json.loads(line))
    except (ValueError, RunDirError):
        return None
