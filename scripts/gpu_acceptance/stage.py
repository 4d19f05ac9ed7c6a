"""One stage in its own process: ``python -m gpu_acceptance.stage NAME CONTEXT RESULT``.

The stage records through ``StageIO``, which rewrites RESULT (JSON) on every change,
so when the runner kills a stage at its time limit, what it had measured is kept.
An exception that escapes the stage marks it failed with the exception's message.
"""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from gpu_acceptance import procs
from gpu_acceptance.context import StageContext
from gpu_acceptance.record import StageResult, write_json_atomic
from gpu_acceptance.stages import by_name


class StageSkippedError(Exception):
    """Raised by a stage that cannot run here; the message is the reason."""


class StageIO:
    """Where a stage puts what it measured, its errors and its outcome."""

    def __init__(self, result: StageResult, path: Path | None) -> None:
        self.result = result
        self.path = path
        self.result.status = "ok"
        self._flush()

    def measure(self, key: str, value: Any) -> None:
        """Record ``measurements[key] = value`` (JSON values only)."""
        self.result.measurements[key] = value
        self._flush()

    def summary(self, text: str) -> None:
        """The stage's one-line result (the markdown table's last column)."""
        self.result.reason = text
        self._flush()

    def error(self, message: str) -> None:
        """Record a failure; the stage goes on and ends ``failed``."""
        self.result.errors.append(message)
        self.result.status = "failed"
        self._flush()

    def skip(self, reason: str) -> StageSkippedError:
        """Mark the stage skipped; raise what this returns to stop it."""
        self.result.status = "skipped"
        self.result.reason = reason
        self._flush()
        return StageSkippedError(reason)

    def _flush(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, self.result.to_json())


def run_stage(name: str, ctx: StageContext, result_path: Path | None) -> StageResult:
    """Run stage ``name``; its result (also written to ``result_path`` as it goes)."""
    spec = by_name(name)
    io = StageIO(StageResult(spec.name, spec.title), result_path)
    try:
        spec.load().run(ctx, io)
    except StageSkippedError:
        pass
    except Exception as e:  # noqa: BLE001 - a crash is the stage's failure, recorded
        io.error(f"{type(e).__name__}: {e}")
        io.measure("traceback", traceback.format_exc()[-3000:])
    if io.result.status == "failed" and not io.result.reason:
        io.summary(io.result.errors[0][:300] if io.result.errors else "failed")
    return io.result


def _on_term(signum: int, frame: FrameType | None) -> None:
    """The runner's time limit: end what the stage started, then unwind (its ``finally``s run)."""
    procs.kill_all()
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    """Entry point of the stage process."""
    signal.signal(signal.SIGTERM, _on_term)
    if len(argv) != 3:
        print("usage: python -m gpu_acceptance.stage NAME CONTEXT_JSON RESULT_JSON")
        return 2
    name, context, result = argv
    ctx = StageContext.load(Path(context))
    run_stage(name, ctx, Path(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
