"""Chrome trace-event JSON, written event by event into a gzip file (Perfetto reads it).

The object form: ``{"otherData": {...}, "traceEvents": [...]}``. Only keys Perfetto's
JSON importer knows are written (it stops at an unknown top-level key, and reads
``displayTimeUnit`` as the unit of ``ts``, so there is none): ``ts`` and ``dur`` are
integer microseconds, ``ts`` comes first in every event, no event holds an array, and
counter arguments are numbers. The file is written beside its name and renamed when
complete, so a reader never opens half of it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

# Above Linux's largest pid (2**22): a merged PyTorch trace's processes never collide.
PID_BASE = 10_000_000
TID_BASE = 20_000_000
_PLAIN = re.compile(r"[ !#-\[\]-~]*")  # printable ASCII but quote and backslash


@contextmanager
def open_trace(path: Path, other_data: dict[str, str]) -> Iterator[TraceEventWriter]:
    """A writer of ``path`` (gzip JSON), renamed into place when the block completes."""
    partial = path.with_name(path.name + ".part")
    try:
        with gzip.open(partial, "wt", encoding="utf-8", compresslevel=6) as out:
            out.write('{"otherData":')
            out.write(json.dumps(other_data, ensure_ascii=False))
            out.write(',\n"traceEvents":[')
            yield TraceEventWriter(out)
            out.write("\n]}\n")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, path)


class TraceEventWriter:
    """Writes trace events, one at a time, into an open ``traceEvents`` array."""

    def __init__(self, out: IO[str]) -> None:
        """Write to ``out``, just after the array's ``[``."""
        self._out = out
        self.count = 0

    def process(self, pid: int, name: str, sort_index: int) -> None:
        """Name a process (a node) and give its place in the track list."""
        self._metadata(pid, pid, "process_name", {"name": name})
        self._metadata(pid, pid, "process_sort_index", {"sort_index": sort_index})

    def thread(self, pid: int, tid: int, name: str, sort_index: int) -> None:
        """Name a thread (a rank) of process ``pid``."""
        self._metadata(pid, tid, "thread_name", {"name": name})
        self._metadata(pid, tid, "thread_sort_index", {"sort_index": sort_index})

    def complete(
        self, pid: int, tid: int, cat: str, name: str, begin_us: int, end_us: int, args: str
    ) -> None:
        """A slice ("X") from ``begin_us`` to ``end_us`` on thread ``tid``.

        ``args`` is a JSON object's text.
        """
        self._event(
            f'{{"ph":"X","ts":{begin_us},"dur":{max(end_us - begin_us, 0)},"pid":{pid},'
            f'"tid":{tid},"cat":{quote(cat)},"name":{quote(name)},"args":{args}}}'
        )

    def instant(self, pid: int, tid: int, cat: str, name: str, ts_us: int, args: str) -> None:
        """An instant ("i") at ``ts_us`` on thread ``tid``; ``args`` is a JSON object's text."""
        self._event(
            f'{{"ph":"i","ts":{ts_us},"pid":{pid},"tid":{tid},"s":"t","cat":{quote(cat)},'
            f'"name":{quote(name)},"args":{args}}}'
        )

    def counter(self, pid: int, ts_us: int, name: str, args: str) -> None:
        """Counter values ("C") of process ``pid``; Perfetto names each track "NAME KEY".

        ``args`` is a JSON object's text whose values are finite numbers.
        """
        self._event(
            f'{{"ph":"C","ts":{ts_us},"pid":{pid},"tid":{pid},"name":{quote(name)},"args":{args}}}'
        )

    def _metadata(self, pid: int, tid: int, name: str, args: dict[str, str | int]) -> None:
        # Metadata events carry no ts: Perfetto and Chrome accept that for ph "M" only.
        event = {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": args}
        self._event(json.dumps(event, ensure_ascii=False, separators=(",", ":")))

    def _event(self, text: str) -> None:
        self._out.write(",\n" if self.count else "\n")
        self._out.write(text)
        self.count += 1


def number(value: int | float, digits: int = 6) -> str:
    """A finite number as short JSON: integers without a point, others rounded."""
    if isinstance(value, int):
        return str(value)
    rounded = round(value, digits)
    return str(int(rounded)) if rounded.is_integer() else repr(rounded)


def to_us(t_s: float) -> int:
    """Seconds as whole microseconds."""
    return int(round(t_s * 1e6))


def quote(text: str) -> str:
    """A JSON string, UTF-8 kept as is (Perfetto's tokenizer reads no unicode escapes)."""
    if _PLAIN.fullmatch(text):
        return f'"{text}"'
    return json.dumps(text, ensure_ascii=False)
