"""``--compile``: when it compiles, that a compiled model trains the same, and the timing.

The compiled runs here use the ``aot_eager`` backend (``compile_backend``): it traces
forward and backward (dynamo, AOTAutograd) as inductor does, then runs the traced
graphs with PyTorch's own kernels. Inductor works on CPU too (it builds C++ with the
system compiler), but compiling the tiny GPT took it 23 s on a quiet two-core machine
and over 40 s per rank on a busy one: too slow for a unit test.
"""

from __future__ import annotations

import dataclasses
import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import require

from toolkit.errors import RtkError
from toolkit.rundir import MetricsLine, ThroughputSums, TrainThroughput, read_metrics
from toolkit.train import compiling
from toolkit.train.compiling import CompileClock
from toolkit.train.config import AUTO_COMPILE_MIN_STEPS, PRESETS, TrainConfig
from toolkit.train.data import SyntheticTokens
from toolkit.train.local_processes import run_local
from toolkit.train.model import GPT
from toolkit.train.strategies import Strategy

SHAPE = PRESETS["tiny"]
CPU = torch.device("cpu")
BACKEND = "aot_eager"


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Any:
    """Each test compiles from scratch, and leaves no compiled code to the next."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ---- when it compiles -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "device", "max_steps", "compiles"),
    [
        ("auto", "cpu", 10_000, False),
        ("auto", "cuda", AUTO_COMPILE_MIN_STEPS, True),
        ("auto", "cuda", AUTO_COMPILE_MIN_STEPS - 1, False),
        ("on", "cpu", 1, True),
        ("on", "cuda", 1, True),
        ("off", "cuda", 10_000, False),
    ],
)
def test_auto_compiles_long_runs_on_cuda_and_on_off_say_so(
    mode: str, device: str, max_steps: int, compiles: bool
) -> None:
    config = TrainConfig(run_dir="r", compile=mode, max_steps=max_steps).check()
    assert config.compiles(device) is compiles


def test_the_default_compiles_long_runs_on_cuda_and_so_is_eager_on_cpu() -> None:
    torch.manual_seed(0)
    strategy = Strategy(GPT(SHAPE), TrainConfig(run_dir="r"), CPU, 0)
    assert TrainConfig(run_dir="r", max_steps=10_000).compiles("cuda")  # not "off"
    assert not TrainConfig(run_dir="r", max_steps=1).compiles("cuda")  # not "on"
    assert strategy.compiled is False


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"compile": "maybe"}, "--compile 'maybe': choose auto, on, off"),
        ({"compile_backend": "tvm"}, "--compile-backend 'tvm': choose inductor, aot_eager"),
    ],
)
def test_compile_options_are_checked(changes: dict[str, str], message: str) -> None:
    with pytest.raises(RtkError, match=message):
        TrainConfig(run_dir="r", **changes).check()  # type: ignore[arg-type]


# ---- a compiled model trains as the eager one --------------------------------------------


def _strategy(compile_mode: str) -> Strategy:
    torch.manual_seed(0)  # the same initial weights for every strategy made here
    config = TrainConfig(
        run_dir="r", compile=compile_mode, compile_backend=BACKEND, gradient_accumulation_steps=2
    )
    return Strategy(GPT(SHAPE), config, CPU, 0)


def _train(strategy: Strategy, first: int, last: int) -> list[float]:
    """Train steps ``first`` to ``last``; their losses."""
    data = SyntheticTokens(SHAPE.vocab_size, SHAPE.seq_len, seed=5)
    losses = []
    for step in range(first, last + 1):
        strategy.set_learning_rate(3e-3)
        micro = [strategy.micro_step(*data.batch(4, step, 0, m), last=m == 1) for m in (0, 1)]
        strategy.optimizer_step()
        losses.append(float(torch.stack(micro).mean()))
    return losses


def test_a_compiled_model_trains_to_the_eager_losses_in_place() -> None:
    eager, compiled = _strategy("off"), _strategy("on")
    assert (eager.compiled, compiled.compiled) == (False, True)
    clock = CompileClock(compiled.compiled)
    first = _train(compiled, 1, 1)
    assert (clock.step(0.0, first=True) or 0.0) > 0  # the first step compiled...
    rest = _train(compiled, 2, 5)
    assert clock.step(0.0, first=False) is None  # ...and the later ones ran it
    losses = _train(eager, 1, 5)
    assert first + rest == pytest.approx(losses, rel=1e-4)
    assert losses[-1] < 0.9 * losses[0]  # it learned: the comparison has teeth


def test_a_checkpoint_is_the_same_compiled_or_not() -> None:
    """Compiled in place: parameter names, and so checkpoints, do not change."""
    eager, compiled = _strategy("off"), _strategy("on")
    _train(compiled, 1, 2)
    model_state, optimizer_state = compiled.state()
    assert list(model_state) == list(eager.state()[0])
    eager.module().load_state_dict(model_state)
    eager.optimizer.load_state_dict(optimizer_state)
    assert _train(eager, 3, 3) == pytest.approx(_train(compiled, 3, 3), rel=1e-4)


# ---- the compile time, apart --------------------------------------------------------------


def test_without_torchs_clock_the_first_step_counts_as_the_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compiling, "compile_seconds", lambda: None)
    clock = CompileClock(True)
    assert clock.step(12.5, first=True) == 12.5
    assert clock.step(0.2, first=False) is None
    assert CompileClock(False).step(12.5, first=True) is None


def _line(step: int, time_s: float, **extra: Any) -> MetricsLine:
    return MetricsLine(step, 2.0, time_s, 1000, 1000 / time_s, 3e-3, 1.0 + step, **extra)


def test_throughput_leaves_the_compiling_steps_out() -> None:
    lines = [
        _line(1, 40.0, mfu=0.001, compile_s=39.5),
        _line(2, 0.5, mfu=0.4),
        _line(3, 1.5, mfu=0.2),
    ]
    figures = TrainThroughput.of(lines)
    assert figures == TrainThroughput(
        compile_s=39.5, compile_steps=1, steps=2, tokens_per_s=1000.0, mfu=pytest.approx(0.25)
    )
    sums = ThroughputSums()
    for line in lines:
        sums.add(line)
    assert sums.figures() == figures


def test_an_eager_run_has_no_compile_time_and_no_mfu_off_gpus() -> None:
    figures = TrainThroughput.of([_line(1, 2.0), _line(2, 2.0)])
    assert figures == TrainThroughput(None, 0, 2, 500.0, None)
    assert TrainThroughput.of([]) == TrainThroughput(None, 0, 0, None, None)


def test_compile_s_is_written_only_where_a_step_compiled() -> None:
    compiled = _line(1, 40.0, compile_s=39.5)
    assert json.loads(compiled.to_line())["compile_s"] == 39.5
    assert MetricsLine.from_json(compiled.to_json()) == compiled
    assert "compile_s" not in _line(2, 0.5).to_json()


# ---- on two ranks, every strategy ---------------------------------------------------------


def _metrics(run_dir: Path) -> list[MetricsLine]:
    lines = list(read_metrics(run_dir / "metrics.jsonl"))
    assert all(isinstance(x, MetricsLine) for x in lines), lines
    return lines  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("strategy", "world"), [("ddp", 2), ("fsdp2", 2), ("deepspeed", 1)], ids=str
)
def test_compiled_ranks_train_as_eager_ones_and_time_the_compile_apart(
    strategy: str, world: int, tmp_path: Path
) -> None:
    if strategy == "deepspeed":
        require(
            find_spec("deepspeed") is not None,
            "deepspeed is not installed (pip install '.[deepspeed]')",
        )
    base = TrainConfig(
        run_dir="-",
        model_size="tiny",
        batch_size=4,
        gradient_accumulation_steps=2,  # DDP: the no_sync micro-step runs compiled too
        max_steps=5,
        seed=3,
        strategy=strategy,
        compile_backend=BACKEND,
    )
    runs = {}
    for mode in ("auto", "on"):  # auto: eager, on CPU
        run_dir = tmp_path / mode
        run_local(
            dataclasses.replace(base, run_dir=str(run_dir), compile=mode),
            world,
            tmp_path / f"rv-{mode}",
        )
        runs[mode] = _metrics(run_dir)
    eager, compiled = runs["auto"], runs["on"]

    assert [m.loss for m in compiled] == pytest.approx([m.loss for m in eager], rel=1e-4)
    assert eager[-1].loss < 0.9 * eager[0].loss
    assert [m.compile_s for m in eager] == [None] * 5
    assert compiled[0].compile_s is not None and compiled[0].compile_s > 0
    assert [m.compile_s for m in compiled[1:]] == [None] * 4
    figures = TrainThroughput.of(compiled)
    assert (figures.compile_s, figures.compile_steps, figures.steps) == (
        compiled[0].compile_s,
        1,
        4,
    )
    later = compiled[1:]
    assert figures.tokens_per_s == pytest.approx(
        sum(m.tokens for m in later) / sum(m.step_time_s for m in later)
    )


def test_the_reports_summary_says_how_long_compiling_took(tmp_path: Path) -> None:
    from telemetry_fixtures import NodeSpec, RunSpec, build_run

    from toolkit.telemetry.report import build_report, summary_dict

    fixture = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1")], steps=6))
    assert summary_dict(build_report(fixture.run_dir))["run"]["compile_s"] is None
    path = fixture.run_dir / "metrics.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["compile_s"] = 31.5
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert summary_dict(build_report(fixture.run_dir))["run"]["compile_s"] == 31.5
