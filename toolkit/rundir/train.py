"""The trainer's records: ``metrics.jsonl`` lines and ``train_config.json``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import RunDirError
from toolkit.json_types import JsonObject
from toolkit.rundir.record_base import Record, record_fields


@dataclass(frozen=True)
class MetricsLine(Record):
    """One step's line in ``metrics.jsonl`` (rank 0 writes one per step).

    Attributes:
        step: The step.
        loss: The loss, averaged over the ranks.
        step_time_s: How long the step took on rank 0.
        tokens: Tokens trained on in the step, all ranks.
        tokens_per_s: ``tokens / step_time_s``.
        lr: The learning rate of the step.
        wall_s: When the line was written.
        mfu: Model FLOPs utilisation, on GPUs whose peak is known.
        compile_s: On a step that compiled the model (``torch.compile``: tracing,
            code generation, the backward's compilation on its first run), the seconds
            rank 0 spent compiling in it; None on other steps. Its ``tokens_per_s`` and
            ``mfu`` are the step's own, compile included: ``TrainThroughput`` leaves
            such steps out.
    """

    step: int
    loss: float
    step_time_s: float
    tokens: int
    tokens_per_s: float
    lr: float
    wall_s: float
    mfu: float | None = None
    compile_s: float | None = None

    def to_json(self) -> JsonObject:
        """The line as written (``mfu`` and ``compile_s`` only when known)."""
        out: JsonObject = {
            "step": self.step,
            "loss": self.loss,
            "step_time_s": self.step_time_s,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens_per_s,
            "lr": self.lr,
            "wall_s": self.wall_s,
        }
        if self.mfu is not None:
            out["mfu"] = self.mfu
        if self.compile_s is not None:
            out["compile_s"] = self.compile_s
        return out

    def to_line(self) -> str:
        """The line as written to ``metrics.jsonl``, newline included."""
        return json.dumps(self.to_json()) + "\n"

    @classmethod
    def from_json(cls, data: object, where: str = "metrics.jsonl") -> MetricsLine:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(
            step=f.integer("step"),
            loss=f.number("loss"),
            step_time_s=f.number("step_time_s"),
            tokens=f.integer("tokens"),
            tokens_per_s=f.number("tokens_per_s"),
            lr=f.number("lr"),
            wall_s=f.number("wall_s"),
            mfu=f.number_or_none("mfu"),
            compile_s=f.number_or_none("compile_s"),
        )


@dataclass(frozen=True)
class TrainThroughput:
    """A run's training speed from its ``metrics.jsonl``, compiling steps apart.

    The steps that compiled the model (``MetricsLine.compile_s``) are counted in
    ``compile_s`` and left out of the rates, so the rates are the compiled model's
    steady speed.

    Attributes:
        compile_s: Seconds spent compiling, all steps together; None when no step
            compiled (an eager run).
        compile_steps: Steps that compiled.
        steps: Steps the rates are over (every other step).
        tokens_per_s: Their tokens over their time; None without such steps.
        mfu: Their model FLOPs utilisation (weighted by step time, which makes it
            ``tokens_per_s``'s); None without such steps or a known GPU peak.
    """

    compile_s: float | None
    compile_steps: int
    steps: int
    tokens_per_s: float | None
    mfu: float | None

    @classmethod
    def of(cls, lines: Iterable[MetricsLine]) -> TrainThroughput:
        """The figures of ``lines`` (read once, in constant memory)."""
        sums = ThroughputSums()
        for line in lines:
            sums.add(line)
        return sums.figures()


@dataclass
class ThroughputSums:
    """Running sums for ``TrainThroughput``, one ``MetricsLine`` at a time."""

    compile_s: float = 0.0
    compile_steps: int = 0
    steps: int = 0
    tokens: int = 0
    time_s: float = 0.0
    mfu_time_s: float = 0.0
    mfu_steps: int = 0

    def add(self, line: MetricsLine) -> None:
        """Count one step."""
        if line.compile_s is not None:
            self.compile_s += line.compile_s
            self.compile_steps += 1
            return
        self.steps += 1
        self.tokens += line.tokens
        self.time_s += line.step_time_s
        if line.mfu is not None:
            self.mfu_time_s += line.mfu * line.step_time_s
            self.mfu_steps += 1

    def figures(self) -> TrainThroughput:
        """The figures of the steps added so far."""
        timed = self.time_s > 0
        return TrainThroughput(
            compile_s=self.compile_s if self.compile_steps else None,
            compile_steps=self.compile_steps,
            steps=self.steps,
            tokens_per_s=self.tokens / self.time_s if timed else None,
            mfu=self.mfu_time_s / self.time_s if timed and self.mfu_steps else None,
        )


def metrics_step(line: str) -> int | None:
    """The step of a ``metrics.jsonl`` line; None for a line cut short or not a step's."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def read_metrics(path: Path) -> Iterator[MetricsLine | RunDirError]:
    """Every line of ``path`` as a ``MetricsLine``, or the error that line gave.

    The reader decides what a bad line means (the report skips it); errors name the
    file and the line number.
    """
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            yield RunDirError(f"{where}: not JSON ({e})")
            continue
        try:
            yield MetricsLine.from_json(data, where)
        except RunDirError as e:
            yield e


@dataclass(frozen=True)
class TrainConfigRecord(Record):
    """What the trainer ran with (``train_config.json``).

    Both parts are the trainer's own records as it wrote them (``toolkit.train``, a
    layer above this one, owns their fields): a reader narrows what it takes out, as
    ``training_progress`` reads ``max_steps``.

    Attributes:
        options: The trainer's options (``TrainConfig.to_json()``).
        layout: The Ray Train workers: ``num_workers``, ``resources_per_worker``,
            ``use_gpu``, ``placement_strategy``.
    """

    options: JsonObject
    layout: JsonObject = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The record as written: the options, and the layout under ``layout``."""
        return {**self.options, "layout": self.layout}

    @classmethod
    def from_json(cls, data: object, where: str = "train_config.json") -> TrainConfigRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        layout = dict(f.nested("layout").data)
        return cls({k: v for k, v in f.data.items() if k != "layout"}, layout)
