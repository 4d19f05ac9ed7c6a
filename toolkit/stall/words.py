"""How a stall's diagnosis names things: a stall, a rank, a place, a count.

One wording for the summary, the suspects' lines and the collectives' line alike
(``diagnosis``, ``flight.blame``).
"""

from __future__ import annotations

from toolkit.stall.detector import Stall
from toolkit.stall.location import EXITED_PHRASE, UNREADABLE_PHRASE
from toolkit.stall.records import RankEvidence


def stall_head(stall: Stall) -> str:
    """``stalled at step 812 for 41 s``."""
    stalled = f"for {stall.stalled_s:.0f} s"
    if stall.step is None:
        return f"stalled before the first step {stalled}"
    return f"stalled at step {stall.step} {stalled}"


def subject(rank: RankEvidence) -> str:
    """``rank 5 (node03, GPU 2)``."""
    if rank.gpu is None:
        return f"rank {rank.rank} ({rank.node})"
    gpu = rank.gpu if rank.gpu.startswith("GPU-") else f"GPU {rank.gpu}"
    return f"rank {rank.rank} ({rank.node}, {gpu[:12]})"


def predicate(phrase: str, plural: bool) -> str:
    """A group's phrase as what its ranks do: ``waits in all_reduce``, ``are in forward``."""
    if phrase.startswith("wait "):
        return ("wait " if plural else "waits ") + phrase.removeprefix("wait ")
    if phrase == EXITED_PHRASE:
        return phrase
    if phrase.startswith(UNREADABLE_PHRASE):
        rest = phrase.removeprefix(UNREADABLE_PHRASE)
        return ("have unreadable stacks" if plural else "has an unreadable stack") + rest
    return ("are " if plural else "is ") + phrase


def count(n: int) -> str:
    """``1 rank``, ``3 ranks``."""
    return f"{n} rank" if n == 1 else f"{n} ranks"
