"""A stall's collectives joined with the ranks' places: whom they blame, and the one line.

``toolkit.stall.flight.collectives`` finds, per process group, the collective it is stuck at
and the ranks it waits for, from the Flight Recorders alone. Here those ranks meet
what their nodes saw of them (``RankEvidence`` and its ``Location``):

- ``collective_blames``: the ranks a stuck collective waits for that the frames did not
  already name (one collective behind at the same line, another collective or size
  in the same slot), each with its reason;
- ``collective_line``: the stall in one line, the collective first, then its first
  culprit (in the suspects' order) and where that rank is:
  ``stalled at step 9 for 41 s: all_reduce #40 (group 0, 4 B) waits for rank 2
  (node3), which is in next_batch() at train.py:52``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from toolkit.stall.detector import Stall
from toolkit.stall.flight.collectives import CollectiveStall, size_text
from toolkit.stall.location import Location
from toolkit.stall.records import RankEvidence, Suspect
from toolkit.stall.words import predicate, stall_head, subject


@dataclass(frozen=True)
class CollectiveBlame:
    """A rank a stuck collective waits for: its suspect record and its sentence."""

    suspect: Suspect
    text: str


def collective_blames(
    collectives: Sequence[CollectiveStall],
    located: Sequence[tuple[RankEvidence, Location]],
    blamed: set[int],
) -> list[CollectiveBlame]:
    """The ranks the stuck ``collectives`` wait for, but those in ``blamed`` already."""
    evidence = {rank.rank: rank for rank, _ in located}
    blames: list[CollectiveBlame] = []
    named = set(blamed)
    for stuck in collectives:
        where = f"{stuck.op} #{stuck.seq} (group {stuck.group})"
        for rank_id in (*sorted(stuck.missing), *sorted(stuck.mismatched)):
            rank = evidence.get(rank_id)
            if rank is None or rank_id in named:
                continue
            if rank_id in stuck.missing:
                reason = f"never joined {where}: its last was #{stuck.missing[rank_id]}"
            else:
                reason = f"calls {stuck.mismatched[rank_id]} at {where}"
            suspect = Suspect(rank.node, reason, rank_id)
            blames.append(CollectiveBlame(suspect, f"{subject(rank)} {reason}"))
            named.add(rank_id)
    return blames


def collective_line(
    stall: Stall,
    collectives: Sequence[CollectiveStall],
    suspect_order: Sequence[int],
    located: Sequence[tuple[RankEvidence, Location]],
    expected: Mapping[int, str],
    silent: Collection[str] = (),
) -> str | None:
    """The stall in one line when a stuck collective waits for someone, else None.

    Args:
        stall: The stall.
        collectives: The stuck collectives, the default group's first.
        suspect_order: The suspects' ranks, most likely first: the first culprit named
            is the likeliest.
        located: Every rank that answered, with its place.
        expected: Each rank's node as the launch placed it.
        silent: The nodes that did not answer.
    """
    stuck = next((c for c in collectives if c.culprits), None)
    if stuck is None:
        return None
    order = {rank: i for i, rank in enumerate(suspect_order)}
    culprits = sorted(stuck.culprits, key=lambda r: (order.get(r, len(order)), r))
    first = culprits[0]
    places = {rank.rank: (rank, where) for rank, where in located}
    size = f", {size_text(stuck.size_bytes)}" if stuck.size_bytes is not None else ""
    what = f"{stuck.op} #{stuck.seq} (group {stuck.group}{size})"
    if first in places:
        rank, where = places[first]
        who = subject(rank)
        place = f", which {predicate(where.phrase, False)}"
    else:
        node = expected.get(first)
        who = f"rank {first}" + (f" ({node})" if node else "")
        place = ", whose node did not answer" if node in silent else ", which gave no evidence"
    if first in stuck.mismatched and first not in stuck.missing:
        text = f"{what} does not match: {who} calls {stuck.mismatched[first]}"
    else:
        text = f"{what} waits for {who}{place}"
    if len(culprits) > 1:
        more = len(culprits) - 1
        text += f" (and {more} more rank{'s' if more > 1 else ''})"
    return f"{stall_head(stall)}: {text}"
