"""Which rank made torchrun fail, and why, read from torchrun's own output on its node.

When a rank dies, torchrun's agent prints a summary (``ChildFailedError``) whose "Root
Cause (first observed failure)" names the rank, its local rank, its host and its exit
code, the signal that ended it, and the rank's error when the script recorded one
(``@record``). A rank that dies of a C++ exception or a Python one prints it before
(``terminate called ... what(): ...``, ``[rank1]: RuntimeError: ...``), which the
summary's ``traceback`` then lacks. ``FailureReader`` reads every line of one node's
torchrun as it goes by, keeps the last error line each rank printed (a bounded map),
and the first Root Cause block; ``describe`` says it in one line:

    rank 1 (local_rank 0) failed first: killed by SIGKILL
    rank 1 (local_rank 0) failed first: SIGABRT after [enforce fail at pair.cc:456]
        op.preamble.length <= op.nbytes. 1452 vs 728. Received data size doesn't ...

Pure: lines in, one line out; the node's actor feeds it (``node_runner``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ERROR_CHARS = 240
MAX_RANKS_KEPT = 1024
_ROOT_CAUSE = "Root Cause (first observed failure):"
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_RANK = re.compile(r"^(\d+)(?: \(local_rank: (\d+)\))?")
_EXITCODE = re.compile(r"^(-?\d+)(?: \(pid: \d+\))?(?:\s+\((SIG\w+)\))?")
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
_ERROR = re.compile(r"^(?:what\(\):\s+|[\w.]*(?:Error|Exception|NotMet)\b:\s)")
_NO_TRACEBACK = ("To enable traceback", "<N/A>", "Signal ")


@dataclass(frozen=True)
class RankFailure:
    """The first rank torchrun saw fail on a node.

    Attributes:
        rank: Its global rank (None: not said).
        local_rank: Its rank on the node.
        host: The host torchrun names.
        exitcode: Its exit code (negative: the signal's number).
        signal: The signal's name (``SIGKILL``), when a signal ended it.
        error: Its error in one line, when it printed or recorded one.
    """

    rank: int | None
    local_rank: int | None
    host: str
    exitcode: int | None
    signal: str | None
    error: str | None

    def describe(self) -> str:
        """``rank 1 (local_rank 0) failed first: killed by SIGKILL``."""
        who = "a rank" if self.rank is None else f"rank {self.rank}"
        if self.local_rank is not None:
            who += f" (local_rank {self.local_rank})"
        if self.error and self.signal:
            why = f"{self.signal} after {self.error}"
        elif self.error:
            why = self.error
        elif self.signal:
            why = f"killed by {self.signal}"
        else:
            why = f"exit {self.exitcode}" if self.exitcode is not None else "no cause given"
        return f"{who} failed first: {_cut(why)}"


class FailureReader:
    """Reads one node's torchrun output for the first rank that failed (see the module)."""

    def __init__(self) -> None:
        self._errors: dict[int | None, str] = {}
        self._block: dict[str, str] | None = None  # the Root Cause block being read
        self._found: RankFailure | None = None

    def feed(self, line: str) -> None:
        """One line of torchrun's output (its ranks' lines included)."""
        text = line.rstrip("\n")
        if self._found is None and self._block is not None:
            self._read_block(text)
            return
        if _ROOT_CAUSE in text:
            if self._found is None:
                self._block = {}
            return
        prefixed = _RANK_PREFIX.match(text)
        rank = int(prefixed.group(1)) if prefixed else None
        body = text[prefixed.end() :] if prefixed else text.strip()
        if _ERROR.match(body) and (rank in self._errors or len(self._errors) < MAX_RANKS_KEPT):
            self._errors[rank] = _short_paths(re.sub(r"^what\(\):\s+", "", body))

    def failure(self) -> RankFailure | None:
        """The first failure torchrun reported (None: none yet)."""
        return self._found

    def _read_block(self, text: str) -> None:
        assert self._block is not None
        field = _FIELD.match(text)
        if field:
            self._block[field.group(1)] = field.group(2).strip()
        if "traceback" in self._block or text.strip().startswith("====="):
            self._found = self._make(self._block)
            self._block = None

    def _make(self, block: dict[str, str]) -> RankFailure:
        rank_match = _RANK.match(block.get("rank", ""))
        rank = int(rank_match.group(1)) if rank_match else None
        local = int(rank_match.group(2)) if rank_match and rank_match.group(2) else None
        code_match = _EXITCODE.match(block.get("exitcode", ""))
        exitcode = int(code_match.group(1)) if code_match else None
        signal = code_match.group(2) if code_match else None
        traceback = block.get("traceback", "")
        recorded = traceback if traceback and not traceback.startswith(_NO_TRACEBACK) else None
        error = recorded or self._errors.get(rank) or self._errors.get(None)
        return RankFailure(rank, local, block.get("host", ""), exitcode, signal, error)


def _short_paths(text: str) -> str:
    """``[enforce fail at /__w/.../tcp/pair.cc:456]`` -> ``[enforce fail at pair.cc:456]``."""
    return re.sub(r"(?:/[\w.+-]+)+/([\w.+-]+:\d+)", r"\1", text)


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3].rstrip() + "..."
