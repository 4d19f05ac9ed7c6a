"""What a simulated cluster is like: how long each operation takes, and what goes wrong."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LatencyModel:
    """How long each operation takes, in model seconds, and how model time maps to real.

    Attributes:
        handshake_s: Opening a node's connection (TCP, SSH key exchange, login); once
            per node per transport, as the SSH transport reuses its connection.
        round_trip_s: One command's round trip on an open connection.
        probe_s: The node agent's probe, on top of the round trip.
        put_s: Writing one file (SFTP), on top of the round trip.
        head_start_s: ``ray start --head``.
        worker_start_s: A worker's ``ray start``.
        status_s: The agent's ``status`` (Ray's node list) on the head.
        facts_s: Preflight's facts script (its port checks included).
        stop_s: The agent's ``stop``.
        unreachable_s: Until a connection to an unreachable node fails.
        scale: Real seconds slept per model second.
    """

    handshake_s: float = 0.2
    round_trip_s: float = 0.005
    probe_s: float = 0.1
    put_s: float = 0.01
    head_start_s: float = 5.0
    worker_start_s: float = 5.0
    status_s: float = 0.05
    facts_s: float = 1.0
    stop_s: float = 0.5
    unreachable_s: float = 10.0
    scale: float = 1.0

    def sleep(self, model_s: float) -> None:
        """Let ``model_s`` model seconds pass."""
        if model_s > 0 and self.scale > 0:
            time.sleep(model_s * self.scale)


@dataclass(frozen=True)
class Faults:
    """What goes wrong, by node name.

    Attributes:
        unreachable: Nodes no connection reaches (every call fails after
            ``LatencyModel.unreachable_s``).
        start_fails: Nodes whose ``ray start`` exits 1.
        join_late_s: Nodes that register with the head this many model seconds after
            their ``ray start`` returned.
        ports_closed: Node -> the Ray ports (by name: ``gcs``, ``object_manager``)
            that refuse every connection there.
        pairs_cut: (source, target) pairs whose connections to any port time out.
        other_rtk: Nodes whose Python imports no rtk (the others import this one).
        gpu_settings_left: Nodes where an earlier run left GPU settings to put back
            (their probe names the restore file).
    """

    unreachable: frozenset[str] = frozenset()
    start_fails: frozenset[str] = frozenset()
    join_late_s: Mapping[str, float] = field(default_factory=dict)
    ports_closed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    pairs_cut: frozenset[tuple[str, str]] = frozenset()
    other_rtk: frozenset[str] = frozenset()
    gpu_settings_left: frozenset[str] = frozenset()


def pick_nodes(names: Sequence[str], rate: float, seed: int = 0) -> frozenset[str]:
    """``rate`` of ``names`` (at least one when ``rate`` > 0), the same ones for a seed."""
    if rate <= 0 or not names:
        return frozenset()
    count = max(1, round(len(names) * rate))
    return frozenset(random.Random(seed).sample(list(names), min(count, len(names))))
