"""A stall at the collective: which collective, which ranks never joined it, and why.

PyTorch's Flight Recorder keeps a ring of each rank's recent collectives
(``TORCH_FR_BUFFER_SIZE``); a dump (``torch._C._distributed_c10d._dump_fr_trace``, made
JSON) lists them with their process group, sequence number, op, sizes and dtypes, and
whether each finished (``retired``, or ``state`` ``completed`` where the backend
tracks it: NCCL does, gloo does not). ``rank_collectives`` reads one rank's dump;
``diagnose_collectives`` compares every rank's, per process group:

- the collective the group is stuck at: the lowest sequence number some rank entered
  and did not finish;
- the ranks missing from it: members whose last entered collective in the group is
  older (they never called it; their frames say where they are instead);
- mismatches: ranks whose collective of that number is another op, size or dtype (a
  rank that skipped or swapped a collective, or a collective of another shape).

What frames cannot see this sees: on GPUs NCCL's collectives are asynchronous, so a
rank's Python thread blocks later and every rank's frame can look the same; a rank one
collective behind the others at the same line; a collective of another size. Pure: it
reads dumps, whichever rank and node made them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolkit.fields import Fields
from toolkit.json_types import JsonObject, JsonValue

# The Flight Recorder's ring, in entries, in every rank rtk starts or records
# (``TORCH_FR_BUFFER_SIZE``; a user's own value wins). Measured on gloo
# (benchmarks/flight_recorder_cost.py, 2 ranks on 2 cores): no cost per collective
# above the run-to-run noise (+-15%) at 200 to 2,000 entries; a dump of a full ring
# took 2 ms at 200, 5 ms at 500 and 95-100 ms at 2,000. 500 holds several steps of
# an FSDP run's collectives (two per layer a step), which is all the diagnosis reads.
FLIGHT_RECORDER_ENTRIES = 500
FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES)}
# Of a rank's ring, the newest entries a node sends back with its evidence and
# ``stall.json`` keeps: the diagnosis reads only the collective a group is stuck at,
# which every rank inside it entered among its last few, and a rank left behind is
# told by its last entered number alone. 16 keep a stall of a thousand ranks near 2 MB.
KEPT_ENTRIES = 16

# Bytes per element of the dtypes the Flight Recorder names (c10's ScalarType names).
DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}


@dataclass(frozen=True)
class Collective:
    """One collective a rank entered, as its Flight Recorder kept it.

    Attributes:
        group: The process group's name (``0`` is the default group).
        seq: Its sequence number in the group (``collective_seq_id``; p2p ops count
            apart and are not read).
        op: The op without its backend, e.g. ``all_reduce``.
        backend: ``gloo`` or ``nccl`` (what ``profiling_name`` starts with).
        sizes: Each input tensor's shape.
        dtypes: Each input tensor's dtype.
        done: Whether it finished.
    """

    group: str
    seq: int
    op: str
    backend: str
    sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    done: bool

    @property
    def size_bytes(self) -> int | None:
        """Its inputs' bytes (None: a dtype of unknown width)."""
        total = 0
        for shape, dtype in zip(self.sizes, self.dtypes, strict=False):
            width = DTYPE_BYTES.get(dtype)
            if width is None:
                return None
            count = 1
            for dim in shape:
                count *= dim
            total += count * width
        return total

    @property
    def shape_key(self) -> tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]:
        """What must match across ranks for the same collective: op, sizes, dtypes."""
        return (self.op, self.sizes, self.dtypes)

    def to_json(self) -> JsonObject:
        """A JSON object (``stall.json``'s per-rank table)."""
        return {
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "backend": self.backend,
            "sizes": [list(shape) for shape in self.sizes],
            "dtypes": list(self.dtypes),
            "done": self.done,
        }

    @classmethod
    def from_fields(cls, f: Fields) -> Collective:
        """The inverse of ``to_json``."""
        sizes = f.data.get("sizes")
        shapes = sizes if isinstance(sizes, list) else []
        return cls(
            group=f.text("group"),
            seq=f.integer("seq"),
            op=f.text("op"),
            backend=f.text("backend"),
            sizes=tuple(
                tuple(d for d in shape if isinstance(d, int))
                for shape in shapes
                if isinstance(shape, list)
            ),
            dtypes=f.texts("dtypes"),
            done=f.flag("done"),
        )


@dataclass(frozen=True)
class RankCollectives:
    """One rank's recent collectives, and per group the last it entered and finished.

    Attributes:
        rank: The global rank.
        collectives: Its entries, oldest first (the ring's; older ones are gone).
        entered: Group -> the last sequence number it entered.
        finished: Group -> the last it finished (from the dump's ``pg_status`` where
            there is one, else from its entries).
        members: Group -> the global ranks in it (from ``pg_config``; empty: unknown).
    """

    rank: int
    collectives: tuple[Collective, ...]
    entered: Mapping[str, int]
    finished: Mapping[str, int]
    members: Mapping[str, tuple[int, ...]]

    def at(self, group: str, seq: int) -> Collective | None:
        """Its collective ``seq`` of ``group``, if the ring still holds it."""
        for collective in reversed(self.collectives):
            if collective.group == group and collective.seq == seq:
                return collective
        return None

    def recent(self, keep: int = KEPT_ENTRIES) -> RankCollectives:
        """The same rank with only its newest ``keep`` entries (the counts stay whole)."""
        kept = self.collectives[-keep:] if keep > 0 else ()
        return RankCollectives(self.rank, kept, self.entered, self.finished, self.members)

    def to_json(self) -> JsonObject:
        """A JSON object: its counts per group, its members and its kept entries."""
        return {
            "rank": self.rank,
            "entered": dict(self.entered),
            "finished": dict(self.finished),
            "members": {group: list(ranks) for group, ranks in self.members.items()},
            "collectives": [c.to_json() for c in self.collectives],
        }

    @classmethod
    def from_fields(cls, f: Fields) -> RankCollectives:
        """The inverse of ``to_json``."""
        counts = [
            {str(g): n for g, n in (f.obj_or_none(key) or {}).items() if isinstance(n, int)}
            for key in ("entered", "finished")
        ]
        members = {
            str(group): tuple(r for r in ranks if isinstance(r, int))
            for group, ranks in (f.obj_or_none("members") or {}).items()
            if isinstance(ranks, list)
        }
        return cls(
            rank=f.integer("rank"),
            collectives=tuple(Collective.from_fields(c) for c in f.objects("collectives")),
            entered=counts[0],
            finished=counts[1],
            members=members,
        )


@dataclass(frozen=True)
class CollectiveStall:
    """Where one process group is stuck, and who keeps it there.

    Attributes:
        group: The process group.
        seq: The collective's sequence number.
        op: Its op, as most of the ranks in it call it.
        size_bytes: Its size, as most of them call it (None: unknown).
        waiting: The ranks in it, not done.
        missing: The group's ranks that never entered it, with the last they entered.
        mismatched: Rank -> what it calls at that number instead (op, size or dtype).
        unanswered: The group's ranks whose recorder gave nothing (stopped, gone, or
            holding the interpreter): their frames and states say more.
    """

    group: str
    seq: int
    op: str
    size_bytes: int | None
    waiting: tuple[int, ...]
    missing: Mapping[int, int]
    mismatched: Mapping[int, str]
    unanswered: tuple[int, ...] = ()

    def to_json(self) -> JsonObject:
        """A JSON object, with its line."""
        return {
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "size_bytes": self.size_bytes,
            "waiting": list(self.waiting),
            "missing": {str(rank): seq for rank, seq in sorted(self.missing.items())},
            "mismatched": {str(rank): what for rank, what in sorted(self.mismatched.items())},
            "unanswered": list(self.unanswered),
            "line": self.line(),
        }

    @classmethod
    def from_fields(cls, f: Fields) -> CollectiveStall:
        """The inverse of ``to_json`` (its line is made again)."""
        missing = f.obj_or_none("missing") or {}
        mismatched = f.obj_or_none("mismatched") or {}
        return cls(
            group=f.text("group"),
            seq=f.integer("seq"),
            op=f.text("op"),
            size_bytes=f.integer_or_none("size_bytes"),
            waiting=f.integers("waiting"),
            missing={int(r): n for r, n in missing.items() if isinstance(n, int)},
            mismatched={int(r): str(what) for r, what in mismatched.items()},
            unanswered=f.integers("unanswered"),
        )

    @property
    def culprits(self) -> tuple[int, ...]:
        """The ranks the others wait for: missing, mismatched, then those that gave nothing."""
        named = [
            *sorted(self.missing),
            *sorted(r for r in self.mismatched if r not in self.missing),
        ]
        return (*named, *sorted(r for r in self.unanswered if r not in named))

    def line(self) -> str:
        """The stall in one line, e.g. ``all_reduce #1630 (group 0, 25 MiB) waits for rank 5``."""
        size = f", {size_text(self.size_bytes)}" if self.size_bytes is not None else ""
        head = f"{self.op} #{self.seq} (group {self.group}{size})"
        parts = []
        if self.missing:
            behind = sorted(self.missing.items())
            ranks = ", ".join(f"{r} (at #{seq})" for r, seq in behind)
            parts.append(f"waits for rank{'s' if len(behind) > 1 else ''} {ranks}")
        if self.mismatched:
            calls = "; ".join(
                f"rank {r} calls {what}" for r, what in sorted(self.mismatched.items())
            )
            parts.append(f"does not match: {calls}")
        if self.unanswered:
            ranks = ", ".join(str(r) for r in self.unanswered)
            parts.append(f"no record from rank{'s' if len(self.unanswered) > 1 else ''} {ranks}")
        if not parts:
            parts.append(f"every rank of the group is in it ({len(self.waiting)})")
        return f"{head} {' and '.join(parts)}"


def rank_collectives(rank: int, dump: Mapping[str, JsonValue]) -> RankCollectives:
    """One rank's Flight Recorder dump (made JSON) as its collectives.

    Entries it cannot read (another torch's format, p2p ops) are left out, never an
    error: the dump is evidence, not a contract.
    """
    collectives = []
    entries = dump.get("entries")
    for entry in entries if isinstance(entries, list) else []:
        found = _collective(entry)
        if found is not None:
            collectives.append(found)
    entered: dict[str, int] = {}
    finished: dict[str, int] = {}
    for c in collectives:
        entered[c.group] = max(entered.get(c.group, 0), c.seq)
        if c.done:
            finished[c.group] = max(finished.get(c.group, 0), c.seq)
    status = dump.get("pg_status")
    for group, state in status.items() if isinstance(status, dict) else []:
        if isinstance(state, dict):
            last_in, last_done = (
                state.get("last_enqueued_collective"),
                state.get("last_completed_collective"),
            )
            if isinstance(last_in, int) and last_in >= 0:
                entered[group] = max(entered.get(group, 0), last_in)
            if isinstance(last_done, int) and last_done >= 0:
                finished[group] = max(finished.get(group, 0), last_done)
    return RankCollectives(rank, tuple(collectives), entered, finished, _members(dump))


def diagnose_collectives(ranks: Sequence[RankCollectives]) -> list[CollectiveStall]:
    """Per process group some rank is stuck in, where it is stuck and who keeps it there.

    Groups every rank finished everything in are not listed. The members of a group are
    those its ``pg_config`` names, else every rank that reported it.
    """
    by_rank = {r.rank: r for r in ranks}
    groups = sorted({g for r in ranks for g in r.entered}, key=_group_order)
    stalls = []
    for group in groups:
        stuck = [r for r in ranks if r.entered.get(group, 0) > r.finished.get(group, 0)]
        if not stuck:
            continue
        seq = min(r.finished.get(group, 0) + 1 for r in stuck)
        members = _group_members(group, ranks)
        inside = {
            rank: c
            for rank in members
            if rank in by_rank and (c := by_rank[rank].at(group, seq)) is not None
        }
        missing = {
            rank: by_rank[rank].entered.get(group, 0)
            for rank in members
            if rank in by_rank and by_rank[rank].entered.get(group, 0) < seq
        }
        common = Counter(c.shape_key for c in inside.values()).most_common(1)
        key = common[0][0] if common else ("?", (), ())
        mismatched = {rank: _difference(c, key) for rank, c in inside.items() if c.shape_key != key}
        sample = next((c for c in inside.values() if c.shape_key == key), None)
        waiting = tuple(sorted(r for r, c in inside.items() if not c.done))
        size = sample.size_bytes if sample is not None else None
        unanswered = tuple(sorted(r for r in members if r not in by_rank))
        stalls.append(
            CollectiveStall(group, seq, key[0], size, waiting, missing, mismatched, unanswered)
        )
    return stalls


def _collective(entry: JsonValue) -> Collective | None:
    if not isinstance(entry, dict) or entry.get("is_p2p"):
        return None
    name, seq = entry.get("profiling_name"), entry.get("collective_seq_id")
    group = entry.get("process_group")
    if not isinstance(name, str) or not isinstance(seq, int) or seq <= 0:
        return None
    backend, _, op = name.rpartition(":")
    group_name = group[0] if isinstance(group, list) and group else entry.get("pg_id", "0")
    sizes = entry.get("input_sizes")
    dtypes = entry.get("input_dtypes")
    return Collective(
        group=str(group_name),
        seq=seq,
        op=op,
        backend=backend,
        sizes=tuple(tuple(d for d in s if isinstance(d, int)) for s in sizes if isinstance(s, list))
        if isinstance(sizes, list)
        else (),
        dtypes=tuple(str(d) for d in dtypes) if isinstance(dtypes, list) else (),
        done=entry.get("retired") is True or entry.get("state") == "completed",
    )


def _members(dump: Mapping[str, JsonValue]) -> dict[str, tuple[int, ...]]:
    """Group -> its global ranks, from ``pg_config`` (the default group may be keyed ``''``)."""
    config = dump.get("pg_config")
    found: dict[str, tuple[int, ...]] = {}
    for name, item in config.items() if isinstance(config, dict) else []:
        ranks = item.get("ranks") if isinstance(item, dict) else None
        if isinstance(ranks, str):  # the Flight Recorder writes the list as text
            ranks = [int(r) for r in ranks.strip("[] ").split(",") if r.strip().isdigit()]
        if isinstance(ranks, list):
            found[name or "0"] = tuple(r for r in ranks if isinstance(r, int))
    return found


def _group_members(group: str, ranks: Sequence[RankCollectives]) -> tuple[int, ...]:
    for r in ranks:
        if r.members.get(group):
            return r.members[group]
    return tuple(sorted(r.rank for r in ranks if group in r.entered))


def _difference(
    c: Collective, key: tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]
) -> str:
    op, sizes, dtypes = key
    if c.op != op:
        return f"{c.op} where the others call {op}"
    if c.sizes != sizes:
        return f"{c.op} of {_shapes(c.sizes)} where the others' is {_shapes(sizes)}"
    return f"{c.op} of {', '.join(c.dtypes)} where the others' is {', '.join(dtypes)}"


def _shapes(sizes: tuple[tuple[int, ...], ...]) -> str:
    return ", ".join("x".join(str(d) for d in s) or "scalar" for s in sizes)


def size_text(size: int) -> str:
    """``25 MiB``, ``3.9 KiB``, ``4 B``."""
    if size >= 2**20:
        return f"{size / 2**20:,.1f} MiB".replace(".0 MiB", " MiB")
    if size >= 2**10:
        return f"{size / 2**10:,.1f} KiB".replace(".0 KiB", " KiB")
    return f"{size} B"


def _group_order(group: str) -> tuple[int, str]:
    return (0, f"{int(group):09d}") if group.isdigit() else (1, group)
