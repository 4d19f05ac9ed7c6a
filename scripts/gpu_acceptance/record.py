"""What an acceptance run found: one ``StageResult`` per stage inside one ``RunRecord``.

The JSON written to ``gpu-acceptance.json`` is ``RunRecord.to_json()``; its shape is the
same in every mode (gpu, cpu, dry-run), so a reader never branches on how it ran.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "skipped")
MODES = ("gpu", "cpu", "dry-run")
JSON_FILE = "gpu-acceptance.json"
MARKDOWN_FILE = "gpu-acceptance.md"
LOG_FILE = "gpu-acceptance.log"


@dataclass
class StageResult:
    """One stage's outcome.

    Attributes:
        name: The stage's name (``--stages`` takes it).
        title: What it checks, in a few words.
        status: ``ok``, ``failed`` or ``skipped``.
        reason: Why it failed or was skipped; for ``ok`` a one-line result.
        duration_s: Wall time the stage took.
        measurements: Everything it measured (JSON values only).
        errors: What went wrong, one message each.
    """

    name: str
    title: str
    status: str = "skipped"
    reason: str = ""
    duration_s: float = 0.0
    measurements: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "duration_s": round(self.duration_s, 3),
            "measurements": self.measurements,
            "errors": list(self.errors),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        """The inverse of ``to_json`` (unknown statuses read as ``failed``)."""
        status = str(data.get("status", "failed"))
        return cls(
            name=str(data["name"]),
            title=str(data.get("title", "")),
            status=status if status in STATUSES else "failed",
            reason=str(data.get("reason", "")),
            duration_s=float(data.get("duration_s") or 0.0),
            measurements=dict(data.get("measurements") or {}),
            errors=[str(e) for e in data.get("errors") or []],
        )


@dataclass
class RunRecord:
    """The whole run: the machine, the environment, and every stage in order.

    Attributes:
        date: When the run started (ISO 8601, UTC).
        mode: ``gpu``, ``cpu`` (no GPU found) or ``dry-run``.
        host: The machine's host name.
        gpu_model: The first GPU's product name; None without a GPU.
        gpu_count: GPUs found.
        driver_version: The NVIDIA driver's version.
        cuda_version: The CUDA version the driver supports.
        torch_version: torch's version (and its CUDA build, when known).
        python_version: The Python that ran the stages.
        command: The command line as given.
        environment: What is importable, what was installed and how.
        stages: Every stage, in the fixed order, selected or not.
        duration_s: Wall time of the whole run so far.
    """

    date: str
    mode: str
    host: str
    gpu_model: str | None
    gpu_count: int
    driver_version: str | None
    cuda_version: str | None
    torch_version: str | None
    python_version: str
    command: list[str]
    environment: dict[str, Any]
    stages: list[StageResult]
    duration_s: float = 0.0

    def counts(self) -> dict[str, int]:
        """How many stages ended in each status."""
        return {s: sum(1 for r in self.stages if r.status == s) for s in STATUSES}

    def to_json(self) -> dict[str, Any]:
        """The JSON written to ``gpu-acceptance.json``."""
        return {
            "schema": SCHEMA_VERSION,
            "date": self.date,
            "mode": self.mode,
            "host": self.host,
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "torch_version": self.torch_version,
            "python_version": self.python_version,
            "command": list(self.command),
            "environment": self.environment,
            "stages": [s.to_json() for s in self.stages],
            "summary": self.counts(),
            "duration_s": round(self.duration_s, 3),
        }


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file (never half written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as indented JSON (NaN and infinities become null)."""
    write_text_atomic(path, json.dumps(_finite(data), indent=2, sort_keys=False) + "\n")


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has none)."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
