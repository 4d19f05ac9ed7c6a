"""The vLLM workload (toolkit/profile/vllm_bench.py): settings, prompts, steps as markers.

vLLM and a GPU are not here, so the timing loop runs a plain Python function that
sleeps in place of the model; its markers go through the real report code on a run
directory with format-exact telemetry (tests/telemetry_fixtures.py). The real module
on a real model runs in the ``gpu`` test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from telemetry_fixtures import T0_WALL_S, NodeSpec, RunSpec, build_run, gpu_uuid

from toolkit.profile.vllm_bench import (
    NO_VLLM,
    BenchError,
    BenchSettings,
    parse_settings,
    require_gpus,
    run_bench,
    synthetic_prompts,
    timed_steps,
)
from toolkit.rundir import MarkerWriter, read_markers
from toolkit.telemetry.report import build_report

STEP_LINE = re.compile(r"^vllm step (\d+)/(\d+): (\d+) tokens in \d+\.\d\d s, \d+ tokens/s$")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-model"
    path.mkdir()
    return path


def settings_json(model: Path | str, **extra: Any) -> str:
    return json.dumps({"model": str(model), **extra})


def problems(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(BenchError) as caught:
        parse_settings(text, env or {})
    assert caught.value.exit_code == 2
    return str(caught.value)


def sleeping_model(output_len: int, sleep_s: float = 0.05) -> Any:
    """Stands in for the model: takes a while, then 'generates' output_len per prompt."""
    calls: list[list[list[int]]] = []

    def generate(prompts: list[list[int]]) -> list[int]:
        calls.append(prompts)
        time.sleep(sleep_s)
        return [output_len] * len(prompts)

    generate.calls = calls  # type: ignore[attr-defined]
    return generate


# --- settings ---------------------------------------------------------------------


def test_settings_defaults_and_run_dir_from_the_environment(model_dir: Path) -> None:
    settings, model, run_dir = parse_settings(settings_json(model_dir), {"RTK_RUN_DIR": "/runs/r1"})
    assert model == model_dir.resolve() and run_dir == Path("/runs/r1")
    assert (settings.batch_size, settings.input_len, settings.output_len) == (8, 128, 128)
    assert (settings.tensor_parallel_size, settings.repeats, settings.seed) == (1, 3, 0)
    assert settings.tokens_per_step == 8 * 128


def test_run_dir_in_the_settings_wins(model_dir: Path, tmp_path: Path) -> None:
    text = settings_json(model_dir, run_dir=str(tmp_path / "mine"), batch_size=2, repeats=5)
    settings, _, run_dir = parse_settings(text, {"RTK_RUN_DIR": "/elsewhere"})
    assert run_dir == tmp_path / "mine" and settings.repeats == 5


def test_cluster_axes_of_a_sweep_are_accepted_and_ignored(model_dir: Path) -> None:
    # rtk profile passes every axis of the run along with the workload's settings
    text = settings_json(
        model_dir, power_limit_w=250, nodes=1, gpu_clocks_mhz=[1200, 1400], batch_size=4
    )
    settings, _, _ = parse_settings(text, {"RTK_RUN_DIR": "/r"})
    assert settings.batch_size == 4


def test_a_model_name_is_refused_nothing_is_downloaded(tmp_path: Path) -> None:
    message = problems(settings_json("facebook/opt-125m"), {"RTK_RUN_DIR": "/r"})
    assert message == (
        "settings.model: 'facebook/opt-125m' does not exist; give a local model directory "
        "(nothing is downloaded)"
    )


def test_a_model_that_is_a_file_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    message = problems(settings_json(weights), {"RTK_RUN_DIR": "/r"})
    assert message.startswith(f"settings.model: {str(weights)!r} is not a directory")


def test_bad_numbers_are_each_named_with_the_value_given(model_dir: Path) -> None:
    text = settings_json(
        model_dir, batch_size=0, input_len=-3, output_len="many", repeats=0, tensor_parallel_size=0
    )
    lines = problems(text, {"RTK_RUN_DIR": "/r"}).splitlines()
    assert len(lines) == 5
    for key, given in [
        ("batch_size", "0"),
        ("input_len", "-3"),
        ("output_len", "'many'"),
        ("repeats", "0"),
        ("tensor_parallel_size", "0"),
    ]:
        (line,) = [line for line in lines if line.startswith(f"settings.{key}: ")]
        assert line.endswith(f", got {given}")


def test_unknown_key_lists_the_valid_ones(model_dir: Path) -> None:
    message = problems(settings_json(model_dir, batch=4), {"RTK_RUN_DIR": "/r"})
    assert message.startswith("settings.batch: not a setting (valid: model, batch_size, ")
    assert "repeats" in message and "run_dir" in message


def test_missing_model_and_run_dir(tmp_path: Path) -> None:
    assert problems(json.dumps({"batch_size": 2}), {"RTK_RUN_DIR": "/r"}) == (
        "settings.model: Field required"
    )
    message = problems(settings_json(tmp_path))
    assert message == "settings.run_dir: not given, and RTK_RUN_DIR is not set"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_settings_that_are_not_a_json_object(text: str) -> None:
    assert problems(text).startswith("settings: ")


# --- the module as a process, on this machine (no vllm, no GPU) ---------------------


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.profile.vllm_bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_without_vllm_it_exits_2_with_the_extra_to_install(model_dir: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    done = run_module(settings_json(model_dir, run_dir=str(tmp_path / "run")))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"vllm_bench: {NO_VLLM}"
    # The extra it names is one the package declares.
    extra = re.search(r"pip install 'rtk\[(\w+)\]'", done.stderr)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert extra is not None and extra.group(1) in project["optional-dependencies"]
    assert not (tmp_path / "run").exists()  # nothing measured, nothing written


def test_bad_settings_exit_2_before_vllm_is_looked_for(tmp_path: Path) -> None:
    done = run_module(settings_json(tmp_path / "nope", batch_size=0), env={"RTK_RUN_DIR": "/r"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "vllm_bench: settings.batch_size: Input should be greater than or equal to 1, got 0",
        f"settings.model: {str(tmp_path / 'nope')!r} does not exist; give a local model "
        "directory (nothing is downloaded)",
    ]
    assert run_module().returncode == 2  # no settings at all: the usage line


def test_every_problem_is_told_at_once() -> None:
    lines = problems(settings_json("org/model", batch_size=0, batchsize=2)).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "settings.batchsize",
        "settings.batch_size",
        "settings.model",
        "settings.run_dir",
    ]


def test_too_few_gpus_is_refused_with_what_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(BenchError) as caught:
        require_gpus(visible, visible + 1)
    assert caught.value.exit_code == 2
    assert str(caught.value) == (
        f"the vllm workload needs {visible + 1} CUDA GPU(s) (tensor_parallel_size) and torch "
        f"sees {visible} here (CUDA_VISIBLE_DEVICES=0); run it on GPU nodes"
    )
    require_gpus(visible, visible)


# --- prompts ------------------------------------------------------------------------


def test_prompts_have_exactly_input_len_ids_and_repeat_with_the_seed() -> None:
    prompts = synthetic_prompts(6, 37, vocab_size=500, seed=7, skip_ids={0, 1, 2})
    assert len(prompts) == 6 and {len(p) for p in prompts} == {37}
    ids = {i for p in prompts for i in p}
    assert ids <= set(range(3, 500)) and len(ids) > 100
    assert synthetic_prompts(6, 37, 500, 7, {0, 1, 2}) == prompts
    assert synthetic_prompts(6, 37, 500, 8, {0, 1, 2}) != prompts
    assert len({tuple(p) for p in prompts}) == 6  # no two prompts alike (no shared prefix)


def test_prompts_need_an_id_to_draw() -> None:
    with pytest.raises(BenchError, match="no token ids"):
        synthetic_prompts(1, 4, vocab_size=2, seed=0, skip_ids={0, 1})


# --- the timing loop and its markers -------------------------------------------------


def test_each_generate_is_one_step_in_the_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTK_NODE", "node1")
    batches = synthetic_prompts(6, 16, 100, seed=0)
    batches_of_2 = [batches[i : i + 2] for i in range(0, 6, 2)]
    model = sleeping_model(output_len=32)
    lines: list[str] = []
    writer = MarkerWriter(tmp_path, rank=0, local_rank=0, world_size=1, gpu_uuid="GPU-x")
    results = timed_steps(model, batches_of_2, writer, lines.append)
    writer.close()

    assert model.calls == batches_of_2
    records = read_markers(tmp_path)
    assert [(r.event, r.step) for r in records] == [
        ("run_start", 0),
        ("step_begin", 1),
        ("step_end", 1),
        ("step_begin", 2),
        ("step_end", 2),
        ("step_begin", 3),
        ("step_end", 3),
        ("run_end", 3),
    ]
    assert {(r.rank, r.world_size, r.node, r.gpu_uuid) for r in records} == {
        (0, 1, "node1", "GPU-x")
    }
    ends = [r for r in records if r.event == "step_end"]
    assert [(r.fields["tokens"], r.fields["input_tokens"]) for r in ends] == [(64, 32)] * 3
    begins = [r for r in records if r.event == "step_begin"]
    for result, begin, end in zip(results, begins, ends, strict=True):
        assert result.duration_s == end.mono_s - begin.mono_s
        assert result.duration_s >= 0.05
        assert result.tokens_per_s == pytest.approx(64 / result.duration_s)
    assert [STEP_LINE.match(line).groups() for line in lines] == [  # type: ignore[union-attr]
        ("1", "3", "64"),
        ("2", "3", "64"),
        ("3", "3", "64"),
    ]


def move_markers(run_dir: Path, run_start_wall_s: float) -> None:
    """Put the markers on the fixture's clock: the same durations, run_start at a time."""
    path = run_dir / "markers" / "rank-00000.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    shift = run_start_wall_s - records[0]["wall_s"]
    path.write_text(
        "".join(json.dumps({**r, "wall_s": r["wall_s"] + shift}) + "\n" for r in records)
    )


def test_the_report_reads_the_steps_tokens_and_energy_per_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # telemetry of one GPU node, without the trainer's markers or metrics
    fixture = build_run(
        tmp_path,
        RunSpec(nodes=[NodeSpec("node1", gpus=1, host=False)], markers=False, metrics=False),
    )
    monkeypatch.setenv("RTK_NODE", "node1")
    settings = BenchSettings(model="unused", batch_size=4, input_len=16, output_len=8, repeats=3)
    model = sleeping_model(output_len=8, sleep_s=0.1)
    lines: list[str] = []
    versions = {"vllm": "stand-in"}
    summary = run_bench(settings, fixture.run_dir, model, 1000, {0}, versions, lines.append)
    assert len(model.calls) == 4  # the warm-up, then 3 steps
    assert lines[0].startswith("vllm warm-up: ")
    move_markers(fixture.run_dir, T0_WALL_S + 1.0)

    report = build_report(fixture.run_dir)
    on_disk = json.loads((fixture.run_dir / "vllm.json").read_text())
    assert on_disk == summary.to_json()
    assert list(on_disk) == [
        "v",
        "settings",
        "run_dir",
        "versions",
        "vocab_size",
        "warmup_s",
        "steps",
        "duration_s",
        "output_tokens",
        "tokens_per_s",
        "short_steps",
    ]
    assert list(on_disk["steps"][0]) == [
        "step",
        "duration_s",
        "input_tokens",
        "output_tokens",
        "tokens_per_s",
    ]
    assert [s["tokens_per_s"] for s in on_disk["steps"]] == [s.tokens_per_s for s in summary.steps]
    assert report.run.steps == 3 and [s.step for s in report.steps] == [1, 2, 3]
    assert report.run.tokens == summary.output_tokens == on_disk["output_tokens"] == 3 * 4 * 8
    for ours, theirs in zip(summary.steps, report.steps, strict=True):
        assert theirs.duration_s == pytest.approx(ours.duration_s, abs=1e-3)
        assert theirs.complete
    start, end = report.window.start_s, report.window.end_s
    assert start == pytest.approx(T0_WALL_S + 1.0)
    assert report.run.tokens_per_s == pytest.approx(96 / (end - start))
    assert report.run.tokens_per_s == pytest.approx(summary.tokens_per_s, rel=0.05)
    counter_j = fixture.devices[("node1", gpu_uuid(0, 0))].counter_delta_j(start, end)
    assert report.run.energy_j == pytest.approx(counter_j)
    assert report.run.energy_per_token_j == pytest.approx(counter_j / 96)
    assert on_disk["settings"]["batch_size"] == 4 and on_disk["versions"] == versions
    assert summary.short_steps == () and on_disk["short_steps"] == []


def test_a_run_directory_used_before_starts_fresh_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = BenchSettings(model="unused", batch_size=1, input_len=4, output_len=2, repeats=1)
    for _ in range(2):
        run_bench(settings, tmp_path, sleeping_model(2, 0.0), 50, (), {}, lambda _: None)
    assert [r.event for r in read_markers(tmp_path)].count("run_start") == 1
    assert len(list((tmp_path / "markers").glob("superseded-*-rank-00000.jsonl"))) == 1


def test_short_generations_are_recorded(tmp_path: Path) -> None:
    settings = BenchSettings(model="unused", batch_size=2, input_len=4, output_len=5, repeats=2)
    summary = run_bench(settings, tmp_path, lambda p: [5, 3], 50, (), {}, lambda _: None)
    assert summary.short_steps == (1, 2) and summary.output_tokens == 16
    assert summary.to_json()["short_steps"] == [1, 2]


# --- on a GPU machine ---------------------------------------------------------------


@pytest.mark.gpu
def test_real_vllm_generates_exactly_the_tokens_asked(tmp_path: Path) -> None:
    model = os.environ.get("RTK_VLLM_MODEL_DIR")
    if not model:
        pytest.fail(
            "set RTK_VLLM_MODEL_DIR to a local model directory (a small one, e.g. "
            "facebook/opt-125m saved with save_pretrained) to run the vllm workload for real"
        )
    run_dir = tmp_path / "run"
    settings = {"model": model, "batch_size": 4, "input_len": 32, "output_len": 16, "repeats": 2}
    done = subprocess.run(
        [sys.executable, "-m", "toolkit.profile.vllm_bench", json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
        env={**os.environ, "RTK_RUN_DIR": str(run_dir)},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((run_dir / "vllm.json").read_text())
    assert [s["output_tokens"] for s in summary["steps"]] == [64, 64]
    assert [s["input_tokens"] for s in summary["steps"]] == [128, 128]
    assert summary["short_steps"] == [] and summary["versions"]["vllm"]
    ends = [r for r in read_markers(run_dir) if r.event == "step_end"]
    assert [r.fields["tokens"] for r in ends] == [64, 64]
    assert ends[0]["gpu_uuid"].startswith(("GPU-", "MIG-"))
    step_lines = [line for line in done.stdout.splitlines() if STEP_LINE.match(line)]
    assert len(step_lines) == 2
