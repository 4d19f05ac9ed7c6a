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
        partial = self.dump.with_name(f".{self.dump.name}.{os.getpid()}")
        try:
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(data) + "\n", encoding="utf-8")
            partial.replace(self.dump)
        except OSError:
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.answer()
            except Exception:  # noqa: BLE001 - evidence, never the rank's death
                time.sleep(self.poll_s)


def flight_recorder_dump() -> JsonObject | None:
    """This process's Flight Recorder as JSON data; None when there is nothing to dump.

    Only a process that imported torch and initialised ``torch.distributed`` has one;
    this never imports torch itself.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.distributed.is_initialized():
            return None
        raw = torch._C._distributed_c10d._dump_fr_trace(True, False, False)
        data = _jsonable(pickle.loads(raw))
    except Exception:  # noqa: BLE001 - an older torch, or no recorder: no dump
        return None
    return data if isinstance(data, dict) else None


def _jsonable(value: object) -> JsonValue:
    """The dump's tuples as lists and its odd values as text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
