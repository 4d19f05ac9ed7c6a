"""The experiment file of ``rtk profile``: a cluster, a workload, axes to sweep, repeats.

```yaml
name: tiny-sweep
inventory: inventory.yaml          # relative to this file
workload:
  train: {model_size: tiny, max_steps: 30, barrier_every: 5}
axes:
  batch_size: [4, 8]
  nodes: [1, 2]
repeats: 2
```

Every combination of the axes' values is a configuration; each runs ``repeats``
times, each time in a run directory of its own. Axes are trainer options (any
``rtk train`` option, as snake_case), or one of ``nodes`` (the first N nodes of the
inventory), ``power_limit_w``, ``gpu_clocks_mhz`` and ``mem_clocks_mhz`` (``[min,
max]`` or one value for both).
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from toolkit.errors import ExperimentError, Problem, RtkError
from toolkit.inventory.problems import (
    format_path,
    parse_yaml,
    problems_from_validation,
    show_key,
)
from toolkit.inventory.yaml_text import restore_written_text
from toolkit.json_types import JsonValue
from toolkit.profile.run_spec import RunSpec, config_id, safe_name, value_text
from toolkit.train.config import TrainConfig, option_names, option_type

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
AXIS_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CLUSTER_AXES = ("nodes", "power_limit_w", "gpu_clocks_mhz", "mem_clocks_mhz")
VLLM_AXES = ("batch_size", "input_len", "output_len")
# Trainer options an axis or the workload may not set: rtk profile owns them.
OWNED = {
    "run_dir": "each run gets its own directory under the sweep directory (output_dir:)",
    "resume": "running the file again resumes the sweep",
    "telemetry": "every run is measured",
    "baseline_s": "give baseline_s: at the top level of the file",
    "cooldown_max_s": "give cooldown_max_s: at the top level of the file",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VllmSpec(_Strict):
    """Generation throughput and energy with vLLM (GPU nodes, the ``vllm`` extra)."""

    model: str = Field(description="A local model directory (nothing is downloaded).")
    batch_size: int = Field(8, ge=1)
    input_len: int = Field(128, ge=1)
    output_len: int = Field(128, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)


class WorkloadSpec(_Strict):
    """What each run runs: exactly one of these."""

    # Checked against the trainer's options and their types by _check, not here.
    train: dict[str, object] | None = Field(None, description="rtk train options.")
    command: list[str] | None = Field(None, description="Any command.")
    vllm: VllmSpec | None = None
    working_dir: str = Field(".", description="Shipped with a command workload.")


class ExperimentSpec(_Strict):
    """The experiment file, key for key."""

    name: str = Field(description="Names the sweep directory; see NAME.")
    inventory: str = Field(description="The cluster's inventory, relative to this file.")
    output_dir: str | None = Field(
        None, description="Where the sweep goes (default: profile-runs/<name> here)."
    )
    workload: WorkloadSpec
    axes: dict[str, list[object]] = Field(default_factory=dict)  # JSON data: see _check
    repeats: int = Field(1, ge=1, le=100)
    baseline_s: float = Field(10.0, ge=0, description="Idle power before each run.")
    cooldown_max_s: float = Field(60.0, ge=0, description="Longest cooldown after a run.")


@dataclass(frozen=True)
class Experiment:
    """A validated experiment, with paths resolved."""

    spec: ExperimentSpec
    source: str
    inventory_path: Path
    sweep_dir: Path

    def runs(self) -> list[RunSpec]:
        """Every run: by node count (one bring-up each), then repeat, then file order.

        Repeat 1 of every configuration with that node count comes before repeat 2.
        """
        names = list(self.spec.axes)
        values = [[_axis_value(n, v) for v in self.spec.axes[n]] for n in names]
        configs = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]
        runs = [
            RunSpec.of(c, repeat) for repeat in range(1, self.spec.repeats + 1) for c in configs
        ]
        return sorted(runs, key=lambda r: r.nodes or 0)  # stable

    def train_options(self, axes: Mapping[str, object]) -> dict[str, object]:
        """The trainer options of one run: the workload's, then the run's axes."""
        base = dict(self.spec.workload.train or {})
        base.update({k: v for k, v in axes.items() if k not in CLUSTER_AXES})
        return base


def train_config(run_dir: str, options: Mapping[str, object]) -> TrainConfig:
    """The trainer's config of a run: ``options`` (``train_options``) in ``run_dir``.

    Raises:
        RtkError: An option the trainer does not have.
        TypeError: An option's value the trainer cannot take.
    """
    return TrainConfig.from_json({"run_dir": run_dir, **options})


def _axis_value(name: str, value: object) -> JsonValue:
    """One value of an axis as JSON data (``_check`` has refused any other).

    Raises:
        RtkError: ``value`` is not JSON data.
    """
    if not _is_json(value):
        raise RtkError(f"axis {name}: got {value!r}, a {type(value).__name__}; not JSON data")
    return value


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file.

    Raises:
        ExperimentError: Every problem, with its line.
    """
    file = Path(path)
    source = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as e:
        raise ExperimentError([Problem(source, None, "", f"cannot read it: {e}")]) from e
    located, twice = parse_yaml(text, source, ExperimentError)
    if twice:
        raise ExperimentError(twice)
    if not isinstance(located.data, dict):
        got = "an empty file" if located.data is None else f"a {type(located.data).__name__}"
        message = f"got {got}; expected a mapping with name:, inventory:, workload: and axes:"
        raise ExperimentError([Problem(source, located.line_of(()), "", message)])
    written = [
        Problem(source, located.line_of(path), format_path(path), message)
        for path, message in restore_written_text(located, ExperimentSpec)
    ]
    try:
        spec = ExperimentSpec.model_validate(located.data)
    except ValidationError as e:
        raise ExperimentError(
            written + problems_from_validation(e, ExperimentSpec, located, source)
        ) from None
    if written:
        raise ExperimentError(written)
    problems = _check(spec, source, located.line_of)
    if problems:
        raise ExperimentError(problems)
    base = file.resolve().parent
    # os.path's expanduser leaves ~nosuchuser as written; Path's raises RuntimeError.
    sweep = Path(os.path.expanduser(spec.output_dir)) if spec.output_dir else Path("profile-runs")
    sweep = sweep if sweep.is_absolute() else base / sweep
    if not spec.output_dir:
        sweep = sweep / spec.name
    return Experiment(spec, source, base / os.path.expanduser(spec.inventory), sweep)


def _check(spec: ExperimentSpec, source: str, line_of: Any) -> list[Problem]:
    problems = []

    def problem(path: tuple[str | int, ...], message: str) -> None:
        problems.append(Problem(source, line_of(path), format_path(path), message))

    if not NAME.fullmatch(spec.name):
        problem(
            ("name",),
            f"got {spec.name!r}; a name is 1-64 letters, digits, '.', '_' and '-', starting "
            "with a letter or digit (it names the sweep directory)",
        )
    workload = spec.workload
    given = [k for k in ("train", "command", "vllm") if getattr(workload, k) is not None]
    if len(given) != 1:
        got = " and ".join(given) if given else "none"
        problem(("workload",), f"give exactly one of train:, command: or vllm: (got {got})")
    if workload.command == []:
        problem(("workload", "command"), "give the command and its arguments, e.g. [python, a.py]")
    train_fields = option_names()
    for key, value in (workload.train or {}).items():
        if key in OWNED or key not in train_fields:
            problem(("workload", "train", key), _not_an_option(key, train_fields))
        elif wrong := _train_value_problem(key, value):
            problem(("workload", "train", key), wrong)
    for name, values in spec.axes.items():
        where = ("axes", name)
        if not values:
            problem(where, "give at least one value")
        for index, value in enumerate(values):
            if not _is_json(value):
                # A run's axes are JSON (RTK_AXIS_*, results.json): a date is none.
                problem(
                    (*where, index),
                    f"got {value!r}, a {type(value).__name__}; give numbers, text, true/false "
                    "or lists of them (YAML reads 2024-01-01 as a date: quote it for text)",
                )
        # Two values with one id or directory would share a run directory: one never runs.
        shown = [value_text(v) for v in values]
        for index, text in enumerate(shown):
            if text in shown[:index]:
                problem((*where, index), f"{values[index]!r} is given twice; give each value once")
                continue
            same = [
                v
                for v, t in zip(values, shown[:index], strict=False)
                if safe_name(t) == safe_name(text)
            ]
            if same:
                problem(
                    (*where, index),
                    f"{values[index]!r} and {same[0]!r} would share a run directory (both "
                    f"{safe_name(text)!r} there); make them differ in letters, digits or . _ = , -",
                )
        if name in CLUSTER_AXES:
            for index, value in enumerate(values):
                wrong = _cluster_value_problem(name, value)
                if wrong:
                    problem((*where, index), wrong)
        elif workload.vllm is not None and name not in VLLM_AXES:
            problem(where, f"a vllm workload sweeps {', '.join(VLLM_AXES + CLUSTER_AXES)}")
        elif workload.vllm is not None:
            for index, value in enumerate(values):
                wrong = _vllm_value_problem(workload.vllm, name, value)
                if wrong:
                    problem((*where, index), wrong)
        elif workload.command is not None and not AXIS_VARIABLE.fullmatch(name):
            problem(
                where,
                f"the command gets each axis as RTK_AXIS_<NAME>; name it with letters, "
                f"digits and '_', not starting with a digit (got {name!r})",
            )
        elif workload.train is not None and (name in OWNED or name not in train_fields):
            problem(where, _not_an_option(name, train_fields, CLUSTER_AXES))
        elif workload.train is not None:
            for index, value in enumerate(values):
                if wrong := _train_value_problem(name, value):
                    problem((*where, index), wrong)
    upper = [name.upper() for name in spec.axes]
    for name in spec.axes:
        if workload.command is not None and upper.count(name.upper()) > 1:
            problem(("axes", name), f"RTK_AXIS_{name.upper()} would name two axes; rename one")
    if workload.train is not None and not problems:
        for axes in itertools.product(*[[(k, v) for v in vs] for k, vs in spec.axes.items()]):
            swept = {k: v for k, v in axes if k not in CLUSTER_AXES}
            try:
                train_config("-", {**workload.train, **swept}).check()
            except (RtkError, TypeError) as e:
                # Blame the axes only when a trainer option is swept; else workload.train.
                if swept:
                    problem(("axes",), f"{config_id(dict(axes))}: {e}")
                else:
                    problem(("workload", "train"), str(e))
                break
    return problems


def _is_json(value: object) -> TypeGuard[JsonValue]:
    """Whether ``value`` is JSON data: what the YAML reader gives, less dates and bytes."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cluster_value_problem(name: str, value: Any) -> str | None:
    """What is wrong with one value of a cluster axis, or None."""
    if name == "nodes":
        if _whole(value) and value >= 1:
            return None
        return f"node counts are whole numbers >= 1; got {value!r}"
    if name == "power_limit_w":
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return None
        return f"a power limit is watts above 0, such as 300; got {value!r}"
    pair = [value, value] if _whole(value) else value
    if (
        isinstance(pair, list)
        and len(pair) == 2
        and all(_whole(v) and v >= 1 for v in pair)
        and pair[0] <= pair[1]
    ):
        return None
    return (
        "clocks are MHz, one value or [min, max] with min <= max, such as [1200, 1400]; "
        f"got {value!r}"
    )


@functools.cache
def _train_option_type(name: str) -> TypeAdapter[Any]:
    return TypeAdapter(option_type(name))


def _train_value_problem(name: str, value: Any) -> str | None:
    """What is wrong with the type of one trainer option's value, or None."""
    try:
        _train_option_type(name).validate_python(value, strict=True)
    except ValidationError as e:
        reason = e.errors(include_url=False)[0]["msg"].replace("Input should be", "expected")
        return f"got {value!r}; {reason}"
    return None


def _vllm_value_problem(vllm: VllmSpec, name: str, value: Any) -> str | None:
    """What vllm would say about ``name: value``, or None."""
    try:
        VllmSpec.model_validate({**vllm.model_dump(), name: value})
    except ValidationError as e:
        reason = e.errors(include_url=False)[0]["msg"].replace("Input should be", "expected")
        return f"got {value!r}; {reason}"
    return None


def _not_an_option(key: str, options: Sequence[str], also: Sequence[str] = ()) -> str:
    if key in OWNED:
        return f"'{key}' is set by rtk profile itself: {OWNED[key]}"
    shown = show_key(key)
    import difflib

    candidates = [o for o in [*options, *also] if o not in OWNED]  # never suggest those
    close = difflib.get_close_matches(key, candidates, n=1)
    guess = f"; did you mean '{close[0]}'?" if close else ""
    others = f" nor one of {', '.join(also)}" if also else ""
    kind = "neither an rtk train option" if also else "not an rtk train option"
    return f"{shown} is {kind}{others}{guess}"
