"""Slow, not stuck: the rank that keeps every other waiting, named live in one line.

A run can make progress and still lose much of each step to one rank that always
arrives last at the step's collective. Who arrived last is read from the ranks'
markers, the way the report's stragglers are (``toolkit.telemetry.report``), but
without their wall clocks, which differ between nodes:

- a ``barrier`` record's ``wait_s`` is how long its rank waited: at a barrier the rank
  that waited least arrived last;
- at a step without barriers, its ``backward`` phase (``phase_begin``/``phase_end``):
  under DDP the gradient all-reduce ends inside backward, so the rank whose backward
  was SHORTEST (``mono_s``, its own clock) entered it last.

Either way a rank's value at a step is a length of its own; ``value - min`` over the
step's ranks is how long each waited for the last one.

Three parts, where they run:

- ``node_steps`` (in a Ray task on each node; standard library and ``toolkit.rundir``):
  the node's ranks' last ``MAX_STEPS`` values, from the tails of their marker files
  (``TAIL_BYTES`` each: a long run's file is hundreds of MB);
- ``find_slow_rank`` (pure): every node's summaries -> the rank last at most of the
  recent steps, or None;
- ``SlowWatch`` (the job driver's watchdog thread): every ``interval_s`` it asks every
  node (``toolkit.ray_fanout``, bounded), and returns the line once per new culprit.

The report's functions are not reused: they take numpy arrays of a whole run's spans
and their energy, order arrivals by wall clocks, and would load the report (half a
second) into every node's task.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import ray

from toolkit.ray_fanout import ask_nodes, pinned
from toolkit.rundir.layout import RunDir
from toolkit.stall.collect import ray_node_ids

BARRIER, BACKWARD = "barrier", "backward"
MAX_STEPS = 64  # a rank's values sent back per source: 64 x 2 numbers
TAIL_BYTES = 256 * 1024  # of each marker file: 64 steps of 8 phases' lines, twice over
WINDOW_STEPS = 50  # the recent steps judged
MIN_STEPS = 30  # fewer judged steps: no finding (2 ranks: chance gives 23 of 30 at 0.5%)
SHARE = 0.5  # last at more than half of the steps ...
CHANCE_MARGIN = 0.25  # ... and at 1/ranks + this: chance alone (2 ranks: 75%, 3: 58%)
TIE_S = 1e-3  # a step whose two least values are closer has no last rank
MIN_WAIT_S = 0.05  # a rank the others wait for less than this a step is not named
INTERVAL_S = 60.0
CPU_SHARE = 0.0025  # of a core, at most: half the watchdog's 0.5% (the next ask waits)
PER_NODE_TIMEOUT_S = 5.0
IN_FLIGHT = 64
ASK_BUDGET_S = 15.0  # the whole ask; nodes not answered by then are skipped

_NEEDLES = (b'"barrier"', b'"backward"')


@dataclass(frozen=True)
class RankSteps:
    """One rank's recent values at its steps' collectives.

    Attributes:
        rank: The rank.
        node: Its node (its markers' ``node``).
        barrier_steps: Steps with a ``barrier`` record, ascending (the last per step).
        barrier_wait_s: Its ``wait_s`` at each.
        backward_steps: Steps with a complete ``backward`` phase, ascending.
        backward_s: Its (last) backward phase's length at each.
    """

    rank: int
    node: str
    barrier_steps: tuple[int, ...] = ()
    barrier_wait_s: tuple[float, ...] = ()
    backward_steps: tuple[int, ...] = ()
    backward_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class NodeSteps:
    """One node's ranks' recent steps (``node_steps``).

    Attributes:
        node: The node.
        ranks: Its ranks, in rank order.
        elapsed_s: How long reading them took.
    """

    node: str
    ranks: tuple[RankSteps, ...]
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class SlowRank:
    """The rank the others keep waiting for.

    Attributes:
        rank: The rank.
        node: Its node.
        last: Judged steps at which it arrived last.
        steps: Steps judged (the recent ones every rank has).
        wait_s: The others' median wait for it at those steps (the median of each
            step's median).
        source: ``barrier`` or ``backward``: what most of those steps were judged by.
    """

    rank: int
    node: str
    last: int
    steps: int
    wait_s: float
    source: str

    @property
    def share(self) -> float:
        """The share of the judged steps at which it was last."""
        return self.last / self.steps if self.steps else 0.0

    def line(self) -> str:
        """The warning, in one line."""
        by = "barriers" if self.source == BARRIER else "backward phases"
        return (
            f"slow, not stuck: rank {self.rank} ({self.node}) was last at {self.last} of "
            f"the last {self.steps} steps; the others waited {_seconds(self.wait_s)} a "
            f"step for it (median; from {by})"
        )


# --- On each node -----------------------------------------------------------------


def node_steps(
    run_dir: str, node: str, max_steps: int = MAX_STEPS, tail_bytes: int = TAIL_BYTES
) -> NodeSteps:
    """The recent steps of ``node``'s ranks, read on that node now.

    A node's ranks are those whose markers name ``node`` (``RTK_NODE``), or, when
    none does, were written on this host (as ``node_evidence`` chooses them).

    Args:
        run_dir: The run directory, as the node sees it.
        node: The node's inventory name.
        max_steps: The most steps kept per rank and source.
        tail_bytes: How much of each marker file's end is read.
    """
    started_s = time.monotonic()
    layout = RunDir(os.path.expanduser(run_dir))
    found = [
        (steps, hostname)
        for path in layout.marker_files()
        if (read := rank_steps(path, max_steps, tail_bytes)) is not None
        for steps, hostname in [read]
    ]
    named = [steps for steps, _ in found if steps.node == node]
    here = socket.gethostname()
    mine = named or [steps for steps, hostname in found if hostname == here]
    ranks = tuple(sorted(mine, key=lambda s: s.rank))
    return NodeSteps(node, ranks, time.monotonic() - started_s)


def rank_steps(
    path: Path, max_steps: int = MAX_STEPS, tail_bytes: int = TAIL_BYTES
) -> tuple[RankSteps, str] | None:
    """A marker file's recent values and its host (None: no barrier nor backward there)."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - tail_bytes))
            data = file.read(tail_bytes)
    except OSError:
        return None
    return parse_steps(data, cut=size > tail_bytes, max_steps=max_steps)


def parse_steps(data: bytes, cut: bool, max_steps: int = MAX_STEPS) -> tuple[RankSteps, str] | None:
    """The values in a marker file's tail ``data`` (``cut``: its first line is partial).

    Only lines that mention a barrier or backward are decoded. A backward phase is
    paired with the ``phase_begin`` just before its ``phase_end``; a step's last one
    counts (as in the report), as does its last barrier.
    """
    lines = data.split(b"\n")
    if cut:
        lines = lines[1:]
    barriers: dict[int, float] = {}
    backwards: dict[int, float] = {}
    begun: float | None = None
    who: tuple[int, str, str] | None = None
    for line in lines:
        record = _record(line)
        if record is None:
            continue
        event, step, mono_s = record.get("event"), record.get("step"), record.get("mono_s")
        if event == "phase_begin" and record.get("name") == BACKWARD:
            begun = mono_s if isinstance(mono_s, int | float) else None
            continue
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        if event == BARRIER:
            wait_s = record.get("wait_s")
            if not isinstance(wait_s, int | float) or isinstance(wait_s, bool):
                continue
            barriers[step] = float(wait_s)
        elif event == "phase_end" and record.get("name") == BACKWARD:
            if begun is None or not isinstance(mono_s, int | float):
                continue
            backwards[step] = float(mono_s) - begun
            begun = None
        else:
            continue
        rank, node, hostname = record.get("rank"), record.get("node"), record.get("hostname")
        if isinstance(rank, int) and isinstance(node, str) and isinstance(hostname, str):
            who = (rank, node, hostname)
    if who is None:
        return None
    b_steps = sorted(barriers)[-max_steps:]
    w_steps = sorted(backwards)[-max_steps:]
    steps = RankSteps(
        rank=who[0],
        node=who[1],
        barrier_steps=tuple(b_steps),
        barrier_wait_s=tuple(barriers[s] for s in b_steps),
        backward_steps=tuple(w_steps),
        backward_s=tuple(backwards[s] for s in w_steps),
    )
    return steps, who[2]


def _record(line: bytes) -> dict[str, object] | None:
    if not any(needle in line for needle in _NEEDLES):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# --- The finding (pure) -------------------------------------------------------------


def find_slow_rank(
    nodes: list[NodeSteps],
    window_steps: int = WINDOW_STEPS,
    min_steps: int = MIN_STEPS,
    min_wait_s: float = MIN_WAIT_S,
) -> SlowRank | None:
    """The rank last at most of the recent steps, or None when none stands out.

    A step is judged when every rank that reports that source has it (a rank's later
    record still on its way would make another look last); of those, the last
    ``window_steps``, each by its barriers if it has any, else by its backward phases.
    A step whose two least values are within ``TIE_S`` has no last rank. A rank is
    named when it was last at more than ``SHARE`` of the judged steps and more than
    ``1 / ranks + CHANCE_MARGIN`` (with two ranks one of them is last at every step:
    at half, chance alone would name one), at ``min_steps`` judged steps or more, and
    the others waited ``min_wait_s`` or more a step for it (median).

    Args:
        nodes: Every node's summary (those that answered).
        window_steps: How many recent steps are judged.
        min_steps: Fewer judged steps: no finding.
        min_wait_s: The least median wait worth a warning.
    """
    ranks = [r for node in nodes for r in node.ranks]
    barrier = _columns(ranks, BARRIER, window_steps, frozenset())
    backward = _columns(ranks, BACKWARD, window_steps, frozenset(barrier.steps))
    judged = sorted(
        (step, by.source, _judge(by.ranks, column))
        for by in (barrier, backward)
        for step, column in zip(by.steps, by.columns, strict=True)
    )[-window_steps:]
    if len(judged) < min_steps:
        return None
    counts = Counter(found[0] for _, _, found in judged if found is not None)
    if not counts:
        return None
    rank, last = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    share = last / len(judged)
    if share <= SHARE or share <= 1 / len(ranks) + CHANCE_MARGIN:
        return None
    mine = [(source, found[1]) for _, source, found in judged if found and found[0] == rank]
    wait_s = statistics.median(waited_s for _, waited_s in mine)
    if wait_s < min_wait_s:
        return None
    by_barrier = sum(1 for source, _ in mine if source == BARRIER)
    node = next(r.node for r in ranks if r.rank == rank)
    source = BARRIER if by_barrier * 2 >= len(mine) else BACKWARD
    return SlowRank(rank, node, last, len(judged), wait_s, source)


@dataclass(frozen=True)
class _Columns:
    """One source's recent steps every rank reporting it has: each step's values."""

    source: str
    steps: list[int]
    ranks: list[int]
    columns: list[tuple[float, ...]]  # per step, the values in the order of ``ranks``


def _columns(
    ranks: list[RankSteps], source: str, window_steps: int, taken: frozenset[int]
) -> _Columns:
    """The last ``window_steps`` steps of ``source`` every rank reporting it has.

    Steps in ``taken`` are left out. The values become columns by ``zip`` (1,000
    nodes' 8,000 ranks in one pass); a rank whose steps end otherwise, by a lookup.
    """
    rows = [
        (r.rank, r.barrier_steps, r.barrier_wait_s)
        if source == BARRIER
        else (r.rank, r.backward_steps, r.backward_s)
        for r in ranks
    ]
    rows = [row for row in rows if row[1]]
    if len(rows) < 2:
        return _Columns(source, [], [], [])
    common = set(rows[0][1]).intersection(*(steps for _, steps, _ in rows[1:]))
    steps = sorted(common - taken)[-window_steps:]
    if not steps:
        return _Columns(source, [], [], [])
    wanted, n = tuple(steps), len(steps)
    values = [
        row_values[-n:]
        if row_steps[-n:] == wanted
        else tuple(dict(zip(row_steps, row_values, strict=False))[s] for s in wanted)
        for _, row_steps, row_values in rows
    ]
    return _Columns(source, steps, [rank for rank, _, _ in rows], list(zip(*values, strict=True)))


def _judge(ranks: list[int], column: tuple[float, ...]) -> tuple[int, float] | None:
    """The step's last rank (the least value) and the others' median wait for it."""
    ordered = sorted(column)
    least, others = ordered[0], ordered[1:]
    if others[0] - least < TIE_S:
        return None
    middle = (others[(len(others) - 1) // 2] + others[len(others) // 2]) / 2
    return ranks[column.index(least)], middle - least


def _seconds(value_s: float) -> str:
    return f"{value_s:.2f} s" if value_s < 1 else f"{value_s:.1f} s"


# --- In the job driver ----------------------------------------------------------------


@ray.remote(num_cpus=0)
def _node_steps(run_dir: str, node: str) -> NodeSteps:
    """``node_steps`` on the node this task runs on."""
    return node_steps(run_dir, node)


Asker = Callable[[], list[NodeSteps]]


def ask_every_node(
    run_dir: str,
    nodes: Mapping[str, str],
    per_node_timeout_s: float = PER_NODE_TIMEOUT_S,
    in_flight: int = IN_FLIGHT,
    budget_s: float = ASK_BUDGET_S,
) -> list[NodeSteps]:
    """Every node's summary that came within its time and the whole ask's budget.

    Args:
        run_dir: The run directory, as the nodes see it.
        nodes: Inventory node name -> its Ray node id (``ray_node_ids``).
        per_node_timeout_s: How long each node may take; one that does not answer is
            skipped.
        in_flight: How many nodes are asked at once.
        budget_s: How long the ask may take in all; the nodes left are skipped.
    """

    def submit(name: str) -> ray.ObjectRef[NodeSteps]:
        task = _node_steps.options(scheduling_strategy=pinned(nodes[name]))
        return task.remote(run_dir, name)

    deadline_s = time.monotonic() + budget_s
    found: list[NodeSteps] = []
    for answer in ask_nodes(nodes, submit, per_node_timeout_s, max(1, in_flight)):
        if isinstance(answer.value, NodeSteps):
            found.append(answer.value)
        if time.monotonic() > deadline_s:
            break  # the tasks still out are dropped with the loop
    return found


class SlowWatch:
    """Asks every node for its ranks' recent steps now and then; names a new culprit once.

    Args:
        run_dir: The run directory, as the nodes see it.
        interval_s: How often the nodes are asked.
        ask: Gathers the nodes' summaries (default: every node of the driver's Ray,
            ``ask_every_node``; nothing when Ray is not initialised here).
    """

    def __init__(
        self, run_dir: str, interval_s: float = INTERVAL_S, ask: Asker | None = None
    ) -> None:
        self.run_dir = run_dir
        self.interval_s = interval_s
        self._ask = ask or self._ask_ray
        self._next_s: float | None = None
        self.culprit: SlowRank | None = None
        self.answered = 0  # nodes that answered the last ask
        self.cost_s = 0.0  # the driver's CPU seconds for the last ask and finding

    def tick(self, now_s: float) -> str | None:
        """The warning when a new rank keeps the others waiting; None otherwise.

        Asks the nodes when ``interval_s`` has passed since the last ask (the first
        call only starts the clock), or longer when the last cost the driver more than
        ``CPU_SHARE`` of a core over it. A culprit is named once (again after a tick
        without one).
        """
        if self._next_s is None:
            self._next_s = now_s + self.interval_s
            return None
        if now_s < self._next_s:
            return None
        cpu_s = time.process_time()  # every thread of the driver: Ray's too
        nodes = self._ask()
        self.answered = len(nodes)
        found = find_slow_rank(nodes)
        self.cost_s = time.process_time() - cpu_s
        self._next_s = now_s + max(self.interval_s, self.cost_s / CPU_SHARE)
        before, self.culprit = self.culprit, found
        if found is None or (before is not None and before.rank == found.rank):
            return None
        return found.line()

    def _ask_ray(self) -> list[NodeSteps]:
        if not ray.is_initialized():
            return []
        return ask_every_node(self.run_dir, ray_node_ids())
