"""A rank's Flight Recorder, dumped when rtk asks, from a thread of the marker writer.

PyTorch's Flight Recorder (on in every rank rtk starts: ``TORCH_FR_BUFFER_SIZE``) keeps
the rank's recent collectives, but dumps them by itself only on NCCL's watchdog timeout.
A rank that writes markers also runs this thread: once a second it looks for the run
directory's ``flight/request`` on its node, and when its text (an id) is new, it dumps
the recorder (``torch._C._distributed_c10d._dump_fr_trace``) as JSON to
``flight/rank-NNNNN.json``, written whole (a temporary file, then a rename). The main
thread may be waiting inside the collective meanwhile: gloo and NCCL release the
interpreter while they wait. When the thread starts it writes that file with no
request in it (``{"request": null}``): a node asked for its ranks' collectives
(``toolkit.stall.flight.dumps``) waits only for the ranks whose file says one watches.

What it cannot reach: a rank whose main thread holds the interpreter (a C extension
spinning without releasing it), a stopped rank (SIGSTOP, a debugger), a rank that
never wrote a marker (its recorder, and so this thread, never started), and a process
where ``torch.distributed`` is not initialised (nothing to dump). Those ranks write no
file; the stall's frames and process states say where they are instead.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import time
from pathlib import Path

from toolkit.json_types import JsonObject, JsonValue

POLL_S = 1.0
ENV = "TORCH_FR_BUFFER_SIZE"


def recording(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the Flight Recorder is on in this process (a positive ring size)."""
    try:
        return int(environ.get(ENV, "0")) > 0
    except ValueError:
        return False


def watch(run_dir: str | Path, rank: int) -> FlightDumper | None:
    """Rank ``rank``'s dumper, started, where this process records (None: it does not).

    Every rank rtk starts or records calls it once its marker file is open: its own
    markers' stream (``recorder``), rtk's trainer (``toolkit.train.loop``).
    """
    if not recording():
        return None
    from toolkit.rundir.layout import RunDir

    layout = RunDir(run_dir)
    return FlightDumper(layout.flight_request, layout.flight_dump(rank)).start()


class FlightDumper:
    """The thread that dumps this rank's Flight Recorder when its node asks."""

    def __init__(self, request: Path, dump: Path, poll_s: float = POLL_S) -> None:
        self.request = request
        self.dump = dump
        self.poll_s = poll_s
        self.answered: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtk-flight-recorder", daemon=True)

    def start(self) -> FlightDumper:
        """Say that this rank answers (its file, with no request), start looking; returns self."""
        self._write({"request": None})
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking (the thread ends within ``poll_s``)."""
        self._stop.set()

    def answer(self) -> bool:
        """Dump now if the request is new; True when a dump was written."""
        try:
            wanted = self.request.read_text(encoding="utf-8").strip()
        except OSError:
            return False
        if not wanted or wanted == self.answered:
            return False
        self.answered = wanted
        dump = flight_recorder_dump()
        if dump is None:
            return False
        dump["request"] = wanted
        return self._write(dump)

    def _write(self, data: JsonObject) -> bool:
        """``data`` as the dump file, written whole; False when it could not be."""
        return write_whole(self.dump, json.dumps(data) + "\n")

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.answer()
            except Exception:  # noqa: BLE001 - evidence, never the rank's death
                time.sleep(self.poll_s)


def ask(request: Path, request_id: str) -> bool:
    """Ask every rank that watches ``request`` to dump its recorder; False when not written.

    ``request`` is a run directory's ``flight/request``: the stall's side of this format.
    """
    return write_whole(request, request_id + "\n")


def write_whole(path: Path, text: str) -> bool:
    """``text`` as ``path``, written whole; False when it could not be written.

    A temporary file, then a rename: a reader never sees half of it.
    """
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    except OSError:
        return False
    return True


# NCCL's recorder first (CUDA builds only), then the one gloo's collectives go to: each
# backend keeps its own ring, and a process group with both (``cuda:nccl,cpu:gloo``)
# numbers each backend's collectives apart.
_RECORDERS = ("_dump_nccl_trace", "_dump_fr_trace")


def flight_recorder_dump() -> JsonObject | None:
    """This process's Flight Recorders as JSON data; None when there is nothing to dump.

    Only a process that imported torch and initialised ``torch.distributed`` has one;
    this never imports torch itself. NCCL's and gloo's rings are read both, and merged
    (``merge_dumps``).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dumps: list[JsonObject] = []
    try:
        if not torch.distributed.is_initialized():
            return None
        c10d = torch._C._distributed_c10d
        for name in _RECORDERS:
            dump = getattr(c10d, name, None)
            if dump is None:
                continue
            data = _jsonable(pickle.loads(dump(True, False, False)))
            if isinstance(data, dict):
                dumps.append(data)
    except Exception:  # noqa: BLE001 - an older torch, or no recorder: no dump
        return None
    return merge_dumps(dumps)


def merge_dumps(dumps: list[JsonObject]) -> JsonObject | None:
    """Several recorders' dumps as one, the first's groups as they are.

    A dump without entries adds nothing but its groups' config. When more than one has
    entries, each later one's process groups are renamed ``NAME/BACKEND`` (its entries,
    ``pg_status`` and ``pg_config`` alike): a group's sequence numbers are its backend's.
    """
    with_entries = [d for d in dumps if isinstance(d.get("entries"), list) and d["entries"]]
    if not dumps:
        return None
    if len(with_entries) <= 1:
        return with_entries[0] if with_entries else dumps[0]
    merged: JsonObject = dict(with_entries[0])
    entries = list(_list(merged.get("entries")))
    status = dict(_dict(merged.get("pg_status")))
    config = dict(_dict(merged.get("pg_config")))
    for later in with_entries[1:]:
        backend = _backend(later)
        for entry in _list(later.get("entries")):
            if isinstance(entry, dict):
                group = entry.get("process_group")
                if isinstance(group, list) and group:
                    entry = {**entry, "process_group": [f"{group[0]}/{backend}", *group[1:]]}
                entries.append(entry)
        status |= {f"{k}/{backend}": v for k, v in _dict(later.get("pg_status")).items()}
        config |= {f"{k or '0'}/{backend}": v for k, v in _dict(later.get("pg_config")).items()}
    merged.update(entries=entries, pg_status=status, pg_config=config)
    return merged


def _backend(dump: JsonObject) -> str:
    """The backend of a dump's entries (``gloo``), from their profiling names."""
    for entry in _list(dump.get("entries")):
        name = entry.get("profiling_name") if isinstance(entry, dict) else None
        if isinstance(name, str) and ":" in name:
            return name.split(":", 1)[0]
    return "other"


def _list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def _dict(value: JsonValue) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _jsonable(value: object) -> JsonValue:
    """The dump's tuples as lists and its odd values as text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
