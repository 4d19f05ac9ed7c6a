"""A node's side of a stall's collectives: ask its ranks, and read what they dumped.

Each rank that writes markers with the Flight Recorder on runs a thread
(``toolkit.markers.flight``) that says so by writing its dump file with no request in
it, and dumps its recorder when the run directory's ``flight/request`` holds a new
id. ``ask`` writes that id (one per collection, the same on every node: a run
directory shared by the nodes is asked once); ``gather`` waits, until its deadline,
for the dumps of this node's ranks that watch, and reads each one's collectives.

A rank whose file says no thread watches there (no file: no Flight Recorder, no
``torch.distributed``, or a rank that never wrote a marker) is not waited for, nor is
one the node sees stopped or gone (``node_evidence`` leaves it out). A rank that
watches but cannot answer (a C extension holding the interpreter) costs the wait:
``FLIGHT_WAIT_S`` at most, the thread's poll and a margin, within the node's time to
answer (``settings.PER_NODE_TIMEOUT_S``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from toolkit.json_types import JsonObject
from toolkit.markers import flight
from toolkit.rundir.layout import RunDir
from toolkit.stall.flight.collectives import RankCollectives, rank_collectives

# How long a node waits for its ranks' dumps after asking: two of their polls and half
# a second to write (a full ring of 2,000 entries takes 0.1 s).
FLIGHT_WAIT_S = 2 * flight.POLL_S + 0.5
_CHECK_S = 0.1


def ask(layout: RunDir, request: str) -> None:
    """Ask every rank that watches ``layout`` for its collectives (``request``: an id).

    A run directory the node cannot write goes without them: the stall goes on.
    """
    flight.ask(layout.flight_request, request)


def gather(
    layout: RunDir, ranks: Iterable[int], request: str, deadline_s: float
) -> dict[int, RankCollectives]:
    """The collectives of each of ``ranks`` that answered ``request`` by ``deadline_s``.

    ``deadline_s`` is on ``time.monotonic()``'s clock; a rank without a watching thread
    is not waited for.
    """
    waiting = {rank for rank in ranks if _stamp(layout, rank) is not None}  # it watches
    seen: dict[int, tuple[int, int]] = {}  # rank -> its file's (mtime, size) last read
    found: dict[int, RankCollectives] = {}
    while waiting:
        for rank in sorted(waiting):
            stamp = _stamp(layout, rank)
            if stamp is None or seen.get(rank) == stamp:
                continue  # a dump is read again only once its file was replaced
            seen[rank] = stamp
            dump = _read(layout, rank)
            if dump is not None and dump.get("request") == request:
                found[rank] = rank_collectives(rank, dump).recent()
                waiting.discard(rank)
        if not waiting or time.monotonic() >= deadline_s:
            break
        time.sleep(_CHECK_S)
    return found


def _stamp(layout: RunDir, rank: int) -> tuple[int, int] | None:
    """Rank ``rank``'s dump file's modification time and size (None: no file)."""
    try:
        info = layout.flight_dump(rank).stat()
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size)


def _read(layout: RunDir, rank: int) -> JsonObject | None:
    """Rank ``rank``'s dump file as JSON (None: none, or not readable)."""
    try:
        data = json.loads(layout.flight_dump(rank).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
