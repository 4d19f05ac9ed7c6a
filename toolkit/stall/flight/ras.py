"""NCCL's own view of a stalled job: its RAS subsystem, asked through ``ncclras``.

NCCL 2.24 and later runs a RAS thread in every process that uses it; the threads form
a mesh over the job's communicators, and ``ncclras -f json`` asks one of them for the
whole job's view: per communicator, each rank's count of collectives issued (per op),
its status (running, aborted, finalized), and the ranks that no longer answer their
peers (unresponsive, or considered dead). A rank with fewer collectives of an op than
the others in its communicator is behind them: it never issued the one they wait in.
That needs no help from the rank itself, so it names a rank whose process cannot dump
its Flight Recorder (stuck in a CUDA call, gone with its node).

The schema read here is NCCL 2.28-2.30's (Ray Train 2.60's hang detector reads the
same; its 2.28.9 output drops a comma in ``missing_ranks``, repaired before parsing).
RAS's view is the whole job's, so a collection asks it on ``RAS_NODES`` nodes only,
and only where a rank has a GPU and ``ncclras`` is on the PATH; the query is bounded
(``RAS_TIMEOUT_S``). NCCL's RAS listens on ``NCCL_RAS_ADDR`` when it is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from toolkit.errors import RtkError
from toolkit.fields import Fields
from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import record_fields

RAS_BINARY = "ncclras"
RAS_ADDR_ENV = "NCCL_RAS_ADDR"
RAS_TIMEOUT_S = 5
RAS_NODES = 2  # nodes asked per collection: one view is the job's, a second in case
RAS_LINES = 6  # lines of RAS's findings on the watchdog's screen, at most
_ERROR_CHARS = 300
# NCCL 2.28.9 writes a missing_ranks entry's fields with no comma before the next key.
_MISSING_COMMA = re.compile(r'([\d"el])(\s*\n\s*)("[^"\n]*"\s*:)')

RUNNING, INITIALISING, ABORTED, FINALIZED = "running", "initialising", "aborted", "finalized"


@dataclass(frozen=True)
class RasRank:
    """One rank of a communicator, as RAS sees it.

    Attributes:
        rank: Its rank in the communicator.
        host: Its host, as NCCL names it (an address).
        pid: Its process.
        status: ``RUNNING``, ``INITIALISING``, ``ABORTED`` or ``FINALIZED``.
        counts: Collectives issued so far, per op (``AllReduce``...).
    """

    rank: int
    host: str
    pid: int | None
    status: str
    counts: Mapping[str, int]


@dataclass(frozen=True)
class RasMissing:
    """A rank of a communicator that no longer answers its peers.

    Attributes:
        rank: Its rank in the communicator.
        host: Its host.
        pid: Its process.
        dead: RAS considers it dead (else: unresponsive).
    """

    rank: int
    host: str
    pid: int | None
    dead: bool


@dataclass(frozen=True)
class RasCommunicator:
    """One communicator: its ranks, and those missing.

    Attributes:
        hash: NCCL's id of the communicator.
        size: Its number of ranks.
        ranks: The ranks RAS reached.
        missing: The ranks it could not.
    """

    hash: str
    size: int
    ranks: tuple[RasRank, ...]
    missing: tuple[RasMissing, ...]

    def behind(self) -> list[tuple[str, int, list[int]]]:
        """Per op whose counts differ: (op, the highest count, the running ranks below it)."""
        found = []
        ops = sorted({op for rank in self.ranks for op in rank.counts})
        for op in ops:
            counts = {r.rank: r.counts.get(op, 0) for r in self.ranks if r.status == RUNNING}
            if not counts:
                continue
            most = max(counts.values())
            lagging = sorted(rank for rank, n in counts.items() if n < most)
            if lagging:
                found.append((op, most, lagging))
        return found


@dataclass(frozen=True)
class RasView:
    """What ``ncclras`` answered on a node, or why it did not.

    Attributes:
        communicators: Every communicator of the job RAS reached.
        error: Why there is no view (the query failed or timed out, output unread).
    """

    communicators: tuple[RasCommunicator, ...] = ()
    error: str | None = None

    def to_json(self) -> JsonObject:
        """As ``stall.json`` keeps it."""
        return {
            "communicators": [
                {
                    "hash": c.hash,
                    "size": c.size,
                    "ranks": [
                        {
                            "rank": r.rank,
                            "host": r.host,
                            "pid": r.pid,
                            "status": r.status,
                            "counts": dict(r.counts),
                        }
                        for r in c.ranks
                    ],
                    "missing": [
                        {"rank": m.rank, "host": m.host, "pid": m.pid, "dead": m.dead}
                        for m in c.missing
                    ],
                }
                for c in self.communicators
            ],
            "error": self.error,
        }

    @classmethod
    def from_fields(cls, f: Fields) -> RasView:
        """The inverse of ``to_json``."""
        return cls(
            communicators=tuple(
                RasCommunicator(
                    hash=c.text("hash"),
                    size=c.integer("size"),
                    ranks=tuple(_kept_rank(r) for r in c.objects("ranks")),
                    missing=tuple(_kept_missing(m) for m in c.objects("missing")),
                )
                for c in f.objects("communicators")
            ),
            error=f.text_or_none("error"),
        )


def _kept_rank(r: Fields) -> RasRank:
    """A rank as ``RasView.to_json`` keeps it."""
    return RasRank(
        rank=r.integer("rank"),
        host=r.text("host"),
        pid=r.integer_or_none("pid"),
        status=r.text("status"),
        counts=_nccl_counts(r.nested("counts")),
    )


def _kept_missing(m: Fields) -> RasMissing:
    """A missing rank as ``RasView.to_json`` keeps it."""
    return RasMissing(
        rank=m.integer("rank"),
        host=m.text("host"),
        pid=m.integer_or_none("pid"),
        dead=m.flag("dead"),
    )


def parse_ras(text: str) -> RasView:
    """``ncclras -f json``'s output as a view; an unreadable one is a view with its error."""
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = json.loads(_MISSING_COMMA.sub(r"\1,\2\3", text))
        except ValueError as e:
            return RasView(error=f"ncclras: output is not JSON ({e})")
    try:
        answer = record_fields(data, "ncclras's answer")
        return RasView(tuple(_communicator(c) for c in answer.objects("communicators")))
    except (RtkError, ValueError) as e:
        return RasView(error=f"ncclras: output not in NCCL 2.28's form ({e})"[:_ERROR_CHARS])


def _communicator(c: Fields) -> RasCommunicator:
    """One communicator in NCCL's words (``collective_counts``, ``missing_ranks``...)."""
    ranks = tuple(
        RasRank(
            rank=c_rank.integer("rank"),
            host=c_rank.text_or_none("host") or "",
            pid=_whole_or_none(c_rank, "pid"),
            status=_status(c_rank.nested_or_none("status")),
            counts=_nccl_counts(c_rank.nested_or_none("collective_counts")),
        )
        for c_rank in c.objects("ranks")
    )
    missing = tuple(
        RasMissing(
            rank=m.integer("rank"),
            host=m.text_or_none("host") or "",
            pid=_whole_or_none(m, "pid"),
            dead=bool(status and status.flag_or_none("considered_dead")),
        )
        for m in c.objects("missing_ranks")
        for status in [m.nested_or_none("status")]
    )
    size = _whole_or_none(c, "size")
    return RasCommunicator(_hash(c), len(ranks) if size is None else size, ranks, missing)


def _hash(c: Fields) -> str:
    value = c.data.get("hash")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise c.fail("hash", "a string or a number")
    return str(value)


def _whole_or_none(f: Fields, key: str) -> int | None:
    """A whole number, written as one or as a string of digits; None when null or missing."""
    value = f.data.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise f.fail(key, "a whole number")
    return value


def _nccl_counts(f: Fields | None) -> dict[str, int]:
    if f is None:
        return {}
    counts = {op: _whole_or_none(f, op) for op in f.data}
    return {op: n for op, n in counts.items() if n is not None}


def _status(f: Fields | None) -> str:
    """A rank's status as RAS's fields give it (as Ray Train's detector reads them)."""
    if f is None:
        return RUNNING
    if f.flag_or_none("abort_flag"):
        return ABORTED
    if f.flag_or_none("finalize_called") or f.flag_or_none("destroy_flag"):
        return FINALIZED
    return RUNNING if (_whole_or_none(f, "init_state") or 0) == 0 else INITIALISING


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def query_ras(
    timeout_s: int = RAS_TIMEOUT_S,
    environ: Mapping[str, str] = os.environ,
    run: Runner = subprocess.run,
    binary: str | None = None,
) -> RasView | None:
    """Ask this node's NCCL RAS for the job's view; None where ``ncclras`` is not here.

    Args:
        timeout_s: ``ncclras -t``: how long RAS may take to gather its peers' answers;
            the process is given two seconds more.
        environ: Where ``NCCL_RAS_ADDR`` is read (RAS's own default when unset).
        run: Runs the command (tests pass their own).
        binary: The client (default: ``ncclras`` on the PATH).
    """
    binary = binary or shutil.which(RAS_BINARY)
    if binary is None:
        return None
    command = [binary, "-f", "json", "-t", str(timeout_s)]
    address = environ.get(RAS_ADDR_ENV, "").strip()
    if address:
        host, _, port = address.rpartition(":")
        command += ["-h", host.strip("[]") or address, *(["-p", port] if host else [])]
    try:
        done = run(command, capture_output=True, text=True, timeout=timeout_s + 2)
    except subprocess.TimeoutExpired:
        return RasView(error=f"ncclras: no answer in {timeout_s + 2} s")
    except OSError as e:
        return RasView(error=f"ncclras: {e}"[:_ERROR_CHARS])
    if done.returncode != 0:
        said = (done.stderr or "").strip().splitlines()
        tail = f": {said[-1]}" if said else ""
        return RasView(error=f"ncclras exited {done.returncode}{tail}"[:_ERROR_CHARS])
    return parse_ras(done.stdout)


def ras_lines(
    view: RasView, rank_nodes: Mapping[int, str] | None = None, limit: int = RAS_LINES
) -> list[str]:
    """RAS's findings, a line each, at most ``limit`` (the rest counted on the last).

    A communicator's rank is named as the job's rank, with its node, where the
    communicator spans the job (``rank_nodes``' size); else by its host.
    """
    if view.error is not None:
        return [f"NCCL RAS: {view.error.removeprefix('ncclras: ')}"]
    rank_nodes = rank_nodes or {}
    found: list[str] = []
    for comm in view.communicators:
        world = bool(rank_nodes) and comm.size == len(rank_nodes)
        where = f"communicator {comm.hash[:12]} ({comm.size} ranks)"

        def name(rank: int, host: str, world: bool = world) -> str:
            if world and rank in rank_nodes:
                return f"rank {rank} ({rank_nodes[rank]})"
            return f"rank {rank} of it ({host})" if host else f"rank {rank} of it"

        for m in comm.missing:
            how = "is considered dead" if m.dead else "does not answer its peers"
            found.append(f"NCCL RAS: {name(m.rank, m.host)} {how}, in {where}")
        for r in comm.ranks:
            if r.status in (ABORTED, FINALIZED):
                found.append(f"NCCL RAS: {name(r.rank, r.host)} has {r.status} {where}")
        hosts = {r.rank: r.host for r in comm.ranks}
        for op, most, lagging in comm.behind():
            first = lagging[0]
            others = f" and {len(lagging) - 1} more" if len(lagging) > 1 else ""
            mine = next(r.counts.get(op, 0) for r in comm.ranks if r.rank == first)
            found.append(
                f"NCCL RAS: {name(first, hosts.get(first, ''))}{others} issued {mine:,} "
                f"{op} where others issued {most:,}, in {where}"
            )
    if len(found) > limit:
        found = [
            *found[: limit - 1],
            f"NCCL RAS: ... and {len(found) - limit + 1} more (stall.json)",
        ]
    return found
