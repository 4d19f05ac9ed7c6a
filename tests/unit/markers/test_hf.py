"""The Hugging Face callback, on a real Trainer: a one-layer GPT-2 from a config, on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from toolkit.markers import recorder
from toolkit.markers.hf import RtkMarkersCallback, _rank_share
from toolkit.rundir.markers import Marker, read_markers

SEQ = 8
BATCH = 2


def train(tmp_path: Path, callback: RtkMarkersCallback, **overrides: Any) -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=SEQ)
    tokens = torch.randint(0, 64, (32, SEQ))
    data = [{"input_ids": row, "labels": row} for row in tokens]
    options: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 4,
        "per_device_train_batch_size": BATCH,
        "gradient_accumulation_steps": 2,
        "include_num_input_tokens_seen": True,
        "logging_steps": 2,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "disable_tqdm": True,
    }
    options.update(overrides)
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=TrainingArguments(**options),
        train_dataset=data,
        eval_dataset=data[:4],
        callbacks=[callback],
    )
    trainer.train()


def events(markers: list[Marker]) -> list[tuple[str, int | None]]:
    return [(m.event, m.step) for m in markers]


def test_every_optimizer_step_is_marked_with_its_tokens_and_logged_loss(
    run_dir: Path, tmp_path: Path
) -> None:
    train(tmp_path, RtkMarkersCallback())
    recorder.reset({})  # the process's exit: run_end
    markers = read_markers(run_dir)

    assert events(markers) == [
        ("run_start", None),
        *[(e, n) for n in range(4) for e in ("step_begin", "step_end")],
        ("run_end", 3),
    ]
    assert markers[0].fields == {"steps_from": "hf"}
    assert {m.rank for m in markers} == {0}
    ends = [m for m in markers if m.event == "step_end"]
    # Two micro-batches of BATCH sequences of SEQ tokens per optimizer step.
    assert [m.fields["tokens"] for m in ends] == [2 * BATCH * SEQ] * 4
    # logging_steps=2: the loss on the steps the Trainer logs (global steps 2 and 4).
    assert ["loss" in m.fields for m in ends] == [False, True, False, True]
    loss = ends[1].fields["loss"]
    assert isinstance(loss, float) and 0 < loss < 10
    begins = [m for m in markers if m.event == "step_begin"]
    assert all(b.mono_s <= e.mono_s for b, e in zip(begins, ends, strict=True))


def test_evaluations_and_checkpoint_saves_are_phases_after_their_step(
    run_dir: Path, tmp_path: Path
) -> None:
    train(
        tmp_path,
        RtkMarkersCallback(),
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        per_device_eval_batch_size=BATCH,
    )
    markers = read_markers(run_dir)

    after_step = [
        ("phase_begin", "eval"),
        ("phase_end", "eval"),
        ("phase_begin", "checkpoint"),
        ("phase_end", "checkpoint"),
    ]
    named = [(m.event, m.fields.get("name", m.step)) for m in markers]
    assert named == [
        ("run_start", None),
        ("step_begin", 0),
        ("step_end", 0),
        ("step_begin", 1),
        ("step_end", 1),
        *after_step,
        ("step_begin", 2),
        ("step_end", 2),
        ("step_begin", 3),
        ("step_end", 3),
        *after_step,
    ]
    # The phases carry the step they follow.
    assert [m.step for m in markers if m.event.startswith("phase")] == [1] * 4 + [3] * 4
    assert (tmp_path / "out" / "checkpoint-4").is_dir()


def test_without_token_counting_the_steps_carry_no_tokens(run_dir: Path, tmp_path: Path) -> None:
    train(tmp_path, RtkMarkersCallback(), include_num_input_tokens_seen="no", max_steps=2)
    ends = [m for m in read_markers(run_dir) if m.event == "step_end"]
    assert [m.step for m in ends] == [0, 1]
    assert all("tokens" not in m.fields for m in ends)


def test_without_rtk_the_callback_writes_nothing(tmp_path: Path) -> None:
    recorder.reset({})
    train(tmp_path, RtkMarkersCallback(), max_steps=1)
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_gathered_token_count_is_split_over_the_ranks_without_losing_any() -> None:
    assert [_rank_share(10, rank, 4) for rank in range(4)] == [3, 3, 2, 2]
    assert sum(_rank_share(1001, rank, 8) for rank in range(8)) == 1001
    assert _rank_share(64, 0, 1) == 64
