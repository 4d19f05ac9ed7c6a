"""Spans of time on ranks (waits at a step's collective, phases) as flat arrays.

Millions of them at scale: each rank's spans are gathered as arrays whose node and GPU
are codes into that rank file's own small name lists (``SpanPart``), and ``join_spans``
concatenates them with one lookup per file, never a Python object per span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from toolkit.telemetry.report.inputs.series import FloatArray

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Waits:
    """Every rank's wait at every step's collective (latest attempt), as flat arrays.

    A wait is a barrier's (its record's ``wait_s``), or, at a step without barrier
    records, derived from the ranks' backward phases (``phase_markers.py``).

    Attributes:
        step: The step of the barrier (or of the collective).
        rank: The waiting rank.
        node: Index into ``nodes``.
        device: The rank's GPU UUID, or None (index into ``devices``, -1 for none).
        enter_s: When it reached the barrier (exit minus its wait).
        exit_s: When the barrier let it go.
        nodes: Node names.
        devices: GPU UUIDs.
        backward: Whether the wait was derived from backward phases (else a barrier's);
            None: all are barriers'.
    """

    step: IntArray
    rank: IntArray
    node: IntArray
    device: IntArray
    enter_s: FloatArray
    exit_s: FloatArray
    nodes: list[str]
    devices: list[str]
    backward: BoolArray | None = None

    @property
    def wait_s(self) -> FloatArray:
        """Each wait's length."""
        wait: FloatArray = self.exit_s - self.enter_s
        return wait

    @property
    def sources(self) -> list[str]:
        """Where the waits came from: ``barriers``, ``backward``, or both, in that order."""
        derived = self.backward if self.backward is not None else np.zeros(len(self), bool)
        return [
            name
            for name, found in (("barriers", (~derived).any()), ("backward", derived.any()))
            if found
        ]

    def __len__(self) -> int:
        return int(self.step.size)


@dataclass(frozen=True)
class SpanPart:
    """One rank's spans; ``node`` and ``device`` are codes into ``names`` and ``gpus``."""

    step: IntArray
    rank: int
    node: IntArray
    device: IntArray
    enter_s: FloatArray
    exit_s: FloatArray
    names: list[str]
    gpus: list[str | None]
    label: IntArray | None = None  # a phase's name, as a code into ``Phases.names``


@dataclass(frozen=True)
class Phases:
    """Every rank's phases (``phase_begin`` to ``phase_end``), latest attempt.

    Attributes:
        spans: Each phase as a span on its rank (``step`` -1 where it has none).
        name: Each phase's name, an index into ``names``.
        names: Phase names, in the order first seen.
    """

    spans: Waits
    name: IntArray
    names: list[str]

    def __len__(self) -> int:
        return len(self.spans)


def join_spans(parts: list[SpanPart], backward: list[bool] | None = None) -> Waits:
    """Every part's spans as one ``Waits``; ``backward``: per part, whether it is derived."""
    used_nodes: set[str] = set()
    used_devices: set[str] = set()
    for part in parts:
        used_nodes.update(part.names[i] for i in np.unique(part.node).tolist())
        used_devices.update(
            d for i in np.unique(part.device).tolist() if (d := part.gpus[i]) is not None
        )
    nodes, devices = sorted(used_nodes), sorted(used_devices)
    node_index = {n: i for i, n in enumerate(nodes)}
    device_index = {d: i for i, d in enumerate(devices)}
    node_codes, device_codes = [], []
    for part in parts:
        to_node = np.array([node_index.get(n, -1) for n in part.names], dtype=np.int64)
        to_device = np.array(
            [-1 if d is None else device_index.get(d, -1) for d in part.gpus], dtype=np.int64
        )
        node_codes.append(to_node[part.node] if part.node.size else part.node)
        device_codes.append(to_device[part.device] if part.device.size else part.device)

    def joined(arrays: Sequence[npt.NDArray[Any]], dtype: type) -> npt.NDArray[Any]:
        return np.concatenate(arrays).astype(dtype) if arrays else np.empty(0, dtype=dtype)

    derived = None
    if backward is not None and any(backward):
        derived = joined(
            [np.full(p.step.size, b, dtype=bool) for p, b in zip(parts, backward, strict=True)],
            bool,
        )
    return Waits(
        step=joined([p.step for p in parts], np.int64),
        rank=joined([np.full(p.step.size, p.rank, dtype=np.int64) for p in parts], np.int64),
        node=joined(node_codes, np.int64),
        device=joined(device_codes, np.int64),
        enter_s=joined([p.enter_s for p in parts], np.float64),
        exit_s=joined([p.exit_s for p in parts], np.float64),
        nodes=nodes,
        devices=devices,
        backward=derived,
    )
