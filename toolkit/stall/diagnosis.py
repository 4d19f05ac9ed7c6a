"""The diagnosis of a stall: every rank grouped by where it is, and the suspects named.

``diagnose`` reads each node's evidence (``toolkit.stall.records.NodeEvidence``): it
places every rank (``toolkit.stall.location``), groups the ranks by place, and names
the suspects, most likely first:

0. nodes Ray lost (declared dead);
1. ranks that exited, then ranks stopped (SIGSTOP, a debugger); but beside a node that
   did not answer, or one Ray lost, ranks that exited are not suspects (their group
   still shows them): a crash does not silence another node, while a silent node ends
   the others' ranks (Ray Train ends its worker group as soon as its health check
   misses a worker, often before Ray declares the node dead; torchrun's agents
   restart theirs), and the watchdog may look while that is under way;
2. nodes that did not answer (with the ranks the launch put there), and ranks that an
   answering node has no trace of;
3. ranks whose stack could not be read (unless that is most ranks: then nothing is
   known of them);
4. when ranks wait for the others (in a collective, or DDP's all-reduce in backward):
   every rank not waiting where most of the waiters wait, since the waiters wait for it;
5. ranks whose last finished step is behind most ranks'.

Where the ranks' Flight Recorders answered (``RankEvidence.collectives``), the
collectives are compared too (``toolkit.stall.flight.collectives``): per process group, the
collective it is stuck at and the ranks that never joined it, call another, or gave no
record. Those ranks are suspects where the frames did not already name them (a rank one
collective behind the others at the same line, a collective of another size), and the
summary names the collective first, with the first culprit's place:
``stalled at step 9 for 12 s: all_reduce #40 (group 0, 4 B) waits for rank 2 (node3),
which is in next_batch() at train.py:52``.

Where a node gave NCCL RAS's view of the job (``toolkit.stall.flight.ras``), its
findings follow, a line each: ranks that no longer answer their peers, and ranks that
issued fewer collectives than the others of their communicator.

When no rank stands out (all wait in the same collective), there are no suspects and
the summary says so. The cost is O(ranks x frames); the summary is one line whatever
the number of ranks, and ``Diagnosis.lines`` one screen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from toolkit.stall.detector import Stall
from toolkit.stall.flight.blame import collective_blames, collective_line
from toolkit.stall.flight.collectives import CollectiveStall, diagnose_collectives
from toolkit.stall.flight.ras import ras_lines
from toolkit.stall.location import (
    EXITED,
    EXITED_PHRASE,
    STOPPED_KIND,
    UNREADABLE,
    Location,
    locate,
)
from toolkit.stall.records import RAY_LOST, NodeEvidence, RankEvidence, StallRecord, Suspect
from toolkit.stall.words import count, predicate, stall_head, subject

NO_ANSWER_PHRASE = "on a node that did not answer"
MISSING_PHRASE = "not found on its node (no marker files)"
NOT_ANSWERED = "did not answer"
# Suspects' tiers, most likely first.
_LOST, _EXITED, _STOPPED, _NO_ANSWER, _MISSING, _UNREADABLE, _ELSEWHERE, _BEHIND = range(8)
RANKS_MAX_CHARS = 60  # a group's ranks on a line of ``lines``


@dataclass(frozen=True)
class Diagnosis:
    """Where the ranks of a stalled run were, and whom that blames.

    Attributes:
        stall: The stall diagnosed.
        summary: The diagnosis in one line.
        groups: Where the ranks were: a phrase -> how many ranks, largest first.
        suspects: Whom the diagnosis blames, most likely first.
        group_ranks: Each group's ranks, sorted.
        suspect_texts: Each suspect in words, as ``lines`` prints it.
        collectives: Where each stuck process group is, from the Flight Recorders.
        ras: NCCL RAS's findings, a line each (none where no node gave its view).
    """

    stall: Stall
    summary: str
    groups: dict[str, int]
    suspects: tuple[Suspect, ...] = ()
    group_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    suspect_texts: tuple[str, ...] = field(default=(), repr=False)
    collectives: tuple[CollectiveStall, ...] = ()
    ras: tuple[str, ...] = field(default=(), repr=False)

    @property
    def every_rank_exited(self) -> bool:
        """True when every rank answered, and every one has exited: the run ended.

        A node that did not answer (a suspect without a rank) leaves it open.
        """
        return set(self.groups) == {EXITED_PHRASE} and all(
            suspect.rank is not None for suspect in self.suspects
        )

    def lines(self, limit: int = 12) -> list[str]:
        """One screen: the summary, the groups, the suspects; at most ``limit`` lines.

        What does not fit is counted on a line ``... and N more (stall.json)``. NCCL
        RAS's findings follow in the room the rest leaves.

        Raises:
            ValueError: ``limit`` is below 1.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        shown = self._lines(limit)
        return shown + _cut(list(self.ras), limit - len(shown))

    def _lines(self, limit: int) -> list[str]:
        groups = [
            f"  {count(n)} {predicate(phrase, n != 1)} "
            f"({'rank' if n == 1 else 'ranks'} {compact_ranks(self.group_ranks.get(phrase, ()))})"
            for phrase, n in self.groups.items()
        ]
        suspects = [f"  {text}" for text in self.suspect_texts]
        header = ["suspects, most likely first:"] if suspects else []
        budget = limit - 1
        if len(groups) + len(header) + len(suspects) <= budget:
            return [self.summary, *groups, *header, *suspects]
        if not suspects:
            return [self.summary, *_cut(groups, budget)]
        # The suspects get at least half the room (their header included), the groups
        # what the suspects leave.
        suspect_room = min(len(suspects) + 1, max(budget - len(groups), (budget + 1) // 2))
        group_room = budget - suspect_room
        if suspect_room <= 1:
            shown = _cut(suspects, suspect_room)
        else:
            shown = [*header, *_cut(suspects, suspect_room - 1)]
        return [self.summary, *_cut(groups, group_room), *shown]

    def to_record(
        self,
        nodes: Sequence[NodeEvidence],
        detected_wall_s: float,
        collect_s: float,
        action: str = "report",
    ) -> StallRecord:
        """The record ``stall.json`` keeps: this diagnosis with every node's evidence."""
        return StallRecord(
            detected_wall_s=detected_wall_s,
            step=self.stall.step,
            stalled_s=self.stall.stalled_s,
            timeout_s=self.stall.timeout_s,
            summary=self.summary,
            groups=dict(self.groups),
            suspects=self.suspects,
            nodes=tuple(nodes),
            collect_s=collect_s,
            action=action,
            collectives=self.collectives,
        )


@dataclass(frozen=True)
class _Blame:
    """A suspect on its way: its tier, its order in it, its record and its words."""

    tier: int
    order: int
    suspect: Suspect
    text: str  # for the lines: the whole sentence
    short: str  # for the summary


def diagnose(
    nodes: Sequence[NodeEvidence], stall: Stall, expected: Mapping[int, str] | None = None
) -> Diagnosis:
    """Group every rank by where it is, and name the suspects (see the module's docstring).

    Args:
        nodes: Every node's answer (or why it gave none).
        stall: The stall, as the detector declared it.
        expected: Each rank's node as the launch placed it (rank -> node), so the ranks
            of a node that did not answer are named, and a rank no node reports is seen.
    """
    expected = expected or {}
    located: list[tuple[RankEvidence, Location]] = []
    members: dict[str, list[int]] = {}
    current = current_ranks(nodes)
    for node in nodes:
        for rank in node.ranks:
            if current.get(rank.rank) is not rank:
                continue  # an earlier attempt's file of this rank, on another node
            where = locate(rank)
            located.append((rank, where))
            members.setdefault(where.phrase, []).append(rank.rank)
    seen = {rank.rank for rank, _ in located}
    blames: list[_Blame] = []

    silent = {node.node: node.error or NOT_ANSWERED for node in nodes if not node.answered}
    expected_on: dict[str, list[int]] = {}
    for rank_id, node_name in sorted(expected.items()):
        if rank_id not in seen:
            expected_on.setdefault(node_name, []).append(rank_id)
    for order, (node_name, error) in enumerate(silent.items()):
        ranks = expected_on.get(node_name, [])
        named = f"{node_name} {NOT_ANSWERED}" + (
            f" (ranks {compact_ranks(ranks)})" if ranks else ""
        )
        suspect = Suspect(node_name, f"{NOT_ANSWERED}: {error}")
        tier = _LOST if error.startswith(RAY_LOST) else _NO_ANSWER
        blames.append(_Blame(tier, order, suspect, f"{named}: {error}", named))
        if ranks:
            members.setdefault(NO_ANSWER_PHRASE, []).extend(ranks)
    for node_name, ranks in expected_on.items():
        if node_name in silent:
            continue
        members.setdefault(MISSING_PHRASE, []).extend(ranks)
        for rank_id in ranks:
            text = f"rank {rank_id} ({node_name}) {predicate(MISSING_PHRASE, False)}"
            suspect = Suspect(node_name, MISSING_PHRASE, rank_id)
            blames.append(_Blame(_MISSING, rank_id, suspect, text, text))

    groups = dict(sorted(((p, len(r)) for p, r in members.items()), key=lambda g: (-g[1], g[0])))
    blames += _rank_blames(located, next(iter(groups), None), exits_explained=bool(silent))
    recorded = [rank.collectives for rank, _ in located if rank.collectives is not None]
    collectives = tuple(diagnose_collectives(recorded)) if recorded else ()
    blamed = {b.suspect.rank for b in blames if b.suspect.rank is not None}
    blames += [
        _Blame(_ELSEWHERE, b.suspect.rank or 0, b.suspect, b.text, b.text)
        for b in collective_blames(collectives, located, blamed)
    ]
    blames.sort(key=lambda b: (b.tier, b.order))
    suspects = tuple(b.suspect for b in blames)
    ranks_in_order = [s.rank for s in suspects if s.rank is not None]
    summary = collective_line(stall, collectives, ranks_in_order, located, expected, silent)
    return Diagnosis(
        stall=stall,
        summary=summary or _summary(stall, groups, blames, located),
        groups=groups,
        suspects=suspects,
        group_ranks={phrase: tuple(sorted(members[phrase])) for phrase in groups},
        suspect_texts=tuple(b.text for b in blames),
        collectives=collectives,
        ras=tuple(_ras_lines(nodes, expected, located)),
    )


def _ras_lines(
    nodes: Sequence[NodeEvidence],
    expected: Mapping[int, str],
    located: Sequence[tuple[RankEvidence, Location]],
) -> list[str]:
    """The first RAS view the nodes gave, in words, its ranks named with their nodes."""
    view = next((node.ras for node in nodes if node.ras is not None), None)
    if view is None:
        return []
    rank_nodes = dict(expected) | {rank.rank: rank.node for rank, _ in located}
    return ras_lines(view, rank_nodes)


def current_ranks(nodes: Sequence[NodeEvidence]) -> dict[int, RankEvidence]:
    """Each rank's evidence from its newest marker file, where several nodes hold one.

    After a restart the worker group is placed anew: rank 2 may now run on node2 while
    node1 still holds the file rank 2 wrote there before, its process long gone. The
    file whose last marker is newest is the rank's now (a file without markers counts
    as oldest).
    """
    newest: dict[int, RankEvidence] = {}
    for node in nodes:
        for rank in node.ranks:
            held = newest.get(rank.rank)
            if held is None or (rank.last_wall_s or 0.0) > (held.last_wall_s or 0.0):
                newest[rank.rank] = rank
    return newest


def _rank_blames(
    located: Sequence[tuple[RankEvidence, Location]],
    largest: str | None,
    exits_explained: bool = False,
) -> list[_Blame]:
    """The suspects among the ranks that answered (tiers exited to behind).

    With ``exits_explained`` (a node was silent, which ends the others' ranks) the
    ranks that exited are none.
    """
    waiting = Counter(where.phrase for _, where in located if where.waiting)
    # Where most waiters wait (ties: the phrase first in order, for the same answer twice).
    main_wait = min(waiting, key=lambda p: (-waiting[p], p)) if waiting else None
    blames: list[_Blame] = []
    blamed: set[int] = set()
    for rank, where in located:
        tier = _place_tier(where, largest, main_wait)
        if tier is None or (tier == _EXITED and exits_explained):
            continue
        text = f"{subject(rank)} {predicate(where.phrase, False)}"
        suspect = Suspect(rank.node, where.phrase, rank.rank, where.frame)
        blames.append(_Blame(tier, rank.rank, suspect, text, text))
        blamed.add(rank.rank)
    steps = Counter(rank.last_step for rank, _ in located)
    usual = max(steps, key=lambda s: (steps[s], -1 if s is None else s)) if steps else None
    if usual is None:
        return blames
    for rank, _ in located:
        if rank.rank in blamed or (rank.last_step is not None and rank.last_step >= usual):
            continue
        last = "no step finished" if rank.last_step is None else f"last step {rank.last_step}"
        reason = f"behind: {last}, most ranks {usual}"
        text = f"{subject(rank)} is {reason}"
        blames.append(_Blame(_BEHIND, rank.rank, Suspect(rank.node, reason, rank.rank), text, text))
    return blames


def _place_tier(where: Location, largest: str | None, main_wait: str | None) -> int | None:
    """The suspect tier of a rank for where it is (None: not a suspect for it)."""
    if where.kind == EXITED:
        return _EXITED
    if where.kind == STOPPED_KIND:
        return _STOPPED
    if where.kind == UNREADABLE:
        return None if where.phrase == largest else _UNREADABLE
    if main_wait is not None and where.phrase != main_wait:
        return _ELSEWHERE
    return None


def _summary(
    stall: Stall,
    groups: Mapping[str, int],
    blames: Sequence[_Blame],
    located: Sequence[tuple[RankEvidence, Location]],
) -> str:
    """The one line: the stall, the likeliest suspect (and how many more), the main group."""
    head = stall_head(stall)
    if not groups and not blames:
        return f"{head}: no rank gave evidence"
    if blames:
        first = blames[0]
        text = first.short
        if len(blames) > 1:
            more = len(blames) - 1
            text += f" (and {more} more suspect{'s' if more > 1 else ''})"
        own = first.suspect.reason if first.suspect.rank is not None else NO_ANSWER_PHRASE
        others = [(p, n) for p, n in groups.items() if p != own]
        if others:
            phrase, n = others[0]
            text += f"; {count(n)} {predicate(phrase, n != 1)}"
        return f"{head}: {text}"
    phrase, n = next(iter(groups.items()))
    total = sum(groups.values())
    if len(groups) == 1:
        waiting = any(where.waiting for _, where in located)
        everyone = f"all {total} ranks" if total > 1 else "the only rank"
        cause = ": a network or NCCL problem?" if waiting else ""
        return f"{head}: {everyone} {predicate(phrase, total > 1)}; no rank stands out{cause}"
    return (
        f"{head}: {total} ranks in {len(groups)} places, most ({n}) "
        f"{predicate(phrase, n != 1)}; no rank stands out"
    )


def _cut(lines: list[str], room: int) -> list[str]:
    """``lines`` in ``room`` lines at most, the last saying how many more there are."""
    if len(lines) <= room:
        return lines
    if room <= 0:
        return []
    return [*lines[: room - 1], f"  ... and {len(lines) - room + 1} more (stall.json)"]


def compact_ranks(ranks: Iterable[int], max_chars: int = RANKS_MAX_CHARS) -> str:
    """``0-4,6-15``: sorted ranks, runs as ranges, cut with ``,...`` past ``max_chars``."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = ""
    for low, high in runs:
        piece = str(low) if low == high else f"{low}-{high}"
        candidate = f"{text},{piece}" if text else piece
        if len(candidate) > max_chars and text:
            return f"{text},..."
        text = candidate
    return text
