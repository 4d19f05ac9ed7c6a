"""``power.jsonl``: what the power policy measured and decided, the one owner of the format.

One JSON object per line, appended by the job driver (``toolkit.power.driver``) as the
run goes, so a crash loses at most the line being written:

- ``start``: the policy, its settings and every GPU's range (a restarted driver adds
  another);
- ``window``: a window of steps at one set of limits: its steps, time per step, and
  each GPU's limit, energy and wait (per GPU only while the limits change; a settled
  window keeps the totals, so a week's run stays small);
- ``decision``: the limits for the next window and why, in one line;
- ``note``: one line that is neither (a limit that could not be set, the put-back).

A restarted driver reads the windows back (``read_power``) and replays them into a new
controller: the profile is resumed, not repeated. The report reads the same file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.json_types import JsonObject
from toolkit.power.windows import Decision, GpuKey, GpuRange, Window

START, WINDOW, DECISION, NOTE = "start", "window", "decision", "note"


def gpu_text(key: GpuKey) -> str:
    """A GPU as the file names it: ``node/gpuN``."""
    return str(key)


def gpu_key(text: str) -> GpuKey:
    """The inverse of ``gpu_text``.

    Raises:
        ValueError: Not ``node/gpuN``.
    """
    node, sep, index = text.rpartition("/gpu")
    if not sep or not node or not index.isdigit():
        raise ValueError(f"not a GPU name (node/gpuN): {text!r}")
    return GpuKey(node, int(index))


def _per_gpu(values: Mapping[GpuKey, float]) -> JsonObject:
    return {gpu_text(k): round(float(v), 6) for k, v in sorted(values.items())}


def _from_per_gpu(data: object) -> dict[GpuKey, float]:
    if not isinstance(data, Mapping):
        return {}
    return {gpu_key(str(k)): float(v) for k, v in data.items()}


@dataclass(frozen=True)
class WindowRecord:
    """A measured window as the file keeps it.

    Attributes:
        wall_s: When it was measured (the driver's wall clock).
        first_step: The first step of the window.
        window: What was measured (per-GPU maps empty when the file kept totals only).
        energy_per_step_j: Every GPU's energy per step, summed.
        mean_limit_w: The GPUs' mean limit during the window.
    """

    wall_s: float
    first_step: int
    window: Window
    energy_per_step_j: float
    mean_limit_w: float


@dataclass(frozen=True)
class PowerLog:
    """``power.jsonl`` read back.

    Attributes:
        policy: The policy of the last ``start``.
        settings: Its settings (as ``PowerSettings.to_json`` wrote them).
        gpus: Every GPU's range, from the last ``start``.
        windows: The measured windows, in order, of every start with the same GPUs.
        decisions: The decisions (limits, why, settled), in order.
        notes: The other lines, in order.
    """

    policy: str
    settings: JsonObject
    gpus: Mapping[GpuKey, GpuRange]
    windows: tuple[WindowRecord, ...] = ()
    decisions: tuple[Decision, ...] = ()
    notes: tuple[str, ...] = field(default=())


class PowerRecorder:
    """Appends ``power.jsonl``'s lines for one driver (see the module's docstring)."""

    def __init__(self, path: str | Path) -> None:
        """Append to ``path`` (its folder is made when missing)."""
        self.path = Path(path)

    def _append(self, line: JsonObject) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(line, separators=(",", ":")) + "\n"
        with self.path.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def start(
        self, wall_s: float, policy: str, settings: JsonObject,
        gpus: Mapping[GpuKey, GpuRange],
    ) -> None:  # fmt: skip
        """The policy starts on these GPUs."""
        ranges: JsonObject = {
            gpu_text(k): [r.min_w, r.max_w, r.default_w] for k, r in sorted(gpus.items())
        }
        self._append(
            {"kind": START, "wall_s": wall_s, "policy": policy, "settings": dict(settings),
             "gpus": ranges}
        )  # fmt: skip

    def window(self, wall_s: float, first_step: int, window: Window, per_gpu: bool) -> None:
        """A measured window; ``per_gpu`` False keeps only its totals."""
        limits = list(window.limits_w.values())
        line: JsonObject = {
            "kind": WINDOW,
            "wall_s": wall_s,
            "first_step": first_step,
            "steps": window.steps,
            "step_s": round(window.step_s, 6),
            "energy_per_step_j": round(window.energy_per_step_j, 6),
            "mean_limit_w": round(sum(limits) / len(limits), 3) if limits else 0.0,
        }
        if per_gpu:
            line["limits_w"] = _per_gpu(window.limits_w)
            line["energy_j"] = _per_gpu(window.energy_j)
            if window.wait_s:
                line["wait_s"] = _per_gpu(window.wait_s)
        self._append(line)

    def decision(self, wall_s: float, decision: Decision, per_gpu: bool) -> None:
        """A decision; ``per_gpu`` False leaves its limits out (unchanged ones)."""
        line: JsonObject = {
            "kind": DECISION,
            "wall_s": wall_s,
            "reason": decision.reason,
            "steps": decision.steps,
            "settled": decision.settled,
        }
        if per_gpu:
            line["limits_w"] = _per_gpu(decision.limits_w)
        self._append(line)

    def note(self, wall_s: float, text: str) -> None:
        """A line that is neither a window nor a decision."""
        self._append({"kind": NOTE, "wall_s": wall_s, "text": text})


def read_power(path: str | Path) -> PowerLog | None:
    """``power.jsonl`` read back (None: no file, or no ``start`` in it).

    A line that is not JSON (the one a crash cut short) is skipped.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    return parse_power(lines)


def parse_power(lines: Iterable[str]) -> PowerLog | None:
    """The log in ``lines`` (see ``read_power``)."""
    log: PowerLog | None = None
    windows: list[WindowRecord] = []
    decisions: list[Decision] = []
    notes: list[str] = []
    for text in lines:
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        kind = line.get("kind")
        try:
            if kind == START:
                gpus = {
                    gpu_key(k): GpuRange(float(v[0]), float(v[1]), float(v[2]))
                    for k, v in dict(line["gpus"]).items()
                }
                if log is not None and dict(log.gpus) != gpus:
                    windows, decisions = [], []  # other GPUs: an earlier profile is not theirs
                log = PowerLog(str(line["policy"]), dict(line.get("settings") or {}), gpus)
            elif kind == WINDOW:
                window = Window(
                    limits_w=_from_per_gpu(line.get("limits_w")),
                    steps=int(line["steps"]),
                    step_s=float(line["step_s"]),
                    energy_j=_from_per_gpu(line.get("energy_j")),
                    wait_s=_from_per_gpu(line.get("wait_s")),
                )
                windows.append(
                    WindowRecord(
                        float(line["wall_s"]), int(line["first_step"]), window,
                        float(line["energy_per_step_j"]), float(line["mean_limit_w"]),
                    )
                )  # fmt: skip
            elif kind == DECISION:
                decisions.append(
                    Decision(
                        _from_per_gpu(line.get("limits_w")), str(line["reason"]),
                        int(line["steps"]), bool(line.get("settled")),
                    )
                )  # fmt: skip
            elif kind == NOTE:
                notes.append(str(line["text"]))
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    if log is None:
        return None
    return PowerLog(
        log.policy, log.settings, log.gpus, tuple(windows), tuple(decisions), tuple(notes)
    )
