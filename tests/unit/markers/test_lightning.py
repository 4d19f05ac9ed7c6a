"""The Lightning callback, on a real Trainer: a tiny token model on CPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning
import pytest
import torch
from torch.utils.data import DataLoader

from toolkit.markers import recorder
from toolkit.markers.lightning import RtkMarkersCallback, batch_counts
from toolkit.rundir.markers import Marker, read_markers

SEQ = 8
BATCH = 2
VOCAB = 32


class TinyLM(lightning.LightningModule):
    """Next-token prediction with an embedding and a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)
        self.losses: list[float] = []

    def _loss(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(ids[:, :-1]))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids = batch["input_ids"] if isinstance(batch, dict) else batch[0]
        loss = self._loss(ids)
        self.losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._loss(batch["input_ids"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def token_batches(n: int) -> DataLoader[Any]:
    torch.manual_seed(0)
    rows = [{"input_ids": row} for row in torch.randint(0, VOCAB, (n * BATCH, SEQ))]
    return DataLoader(rows, batch_size=BATCH)  # type: ignore[arg-type]


def fit(
    model: TinyLM, loader: DataLoader[Any], val: DataLoader[Any] | None = None, **options: Any
) -> None:
    trainer = lightning.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RtkMarkersCallback()],
        **options,
    )
    trainer.fit(model, loader, val)


def steps(markers: list[Marker]) -> list[tuple[str, int | None]]:
    return [(m.event, m.step) for m in markers if m.event.startswith("step_")]


def test_every_optimizer_step_is_marked_with_its_tokens_samples_and_loss(run_dir: Path) -> None:
    model = TinyLM()
    fit(model, token_batches(6), max_steps=3)
    markers = read_markers(run_dir)

    assert markers[0].event == "run_start" and markers[0].fields == {"steps_from": "lightning"}
    assert steps(markers) == [(e, n) for n in range(3) for e in ("step_begin", "step_end")]
    ends = [m for m in markers if m.event == "step_end"]
    assert [(m.fields["tokens"], m.fields["samples"]) for m in ends] == [(BATCH * SEQ, BATCH)] * 3
    assert [m.fields["loss"] for m in ends] == pytest.approx(model.losses)


def test_with_accumulation_a_step_spans_its_batches_and_the_epoch_ends_a_short_one(
    run_dir: Path,
) -> None:
    model = TinyLM()
    # Five batches, two per optimizer step: steps of 2, 2 and 1 batches.
    fit(model, token_batches(5), max_epochs=1, accumulate_grad_batches=2)
    markers = read_markers(run_dir)

    assert steps(markers) == [(e, n) for n in range(3) for e in ("step_begin", "step_end")]
    ends = [m for m in markers if m.event == "step_end"]
    assert [m.fields["tokens"] for m in ends] == [2 * BATCH * SEQ, 2 * BATCH * SEQ, BATCH * SEQ]
    assert [m.fields["samples"] for m in ends] == [2 * BATCH, 2 * BATCH, BATCH]
    # The step's loss is the mean of its batches' losses (not Lightning's loss / 2).
    losses = model.losses
    expected = [(losses[0] + losses[1]) / 2, (losses[2] + losses[3]) / 2, losses[4]]
    assert [m.fields["loss"] for m in ends] == pytest.approx(expected)


def test_validation_runs_are_eval_phases_between_steps(run_dir: Path) -> None:
    fit(
        TinyLM(),
        token_batches(4),
        token_batches(1),
        max_steps=4,
        val_check_interval=2,
        limit_val_batches=1,
        num_sanity_val_steps=1,
    )
    markers = read_markers(run_dir)

    named = [(m.event, m.fields.get("name"), m.step) for m in markers if m.event != "run_start"]
    eval_phase = [("phase_begin", "eval"), ("phase_end", "eval")]
    assert [(e, name) for e, name, _ in named if e.startswith("phase")] == eval_phase * 3
    order = [(e, step) for e, name, step in named]
    assert order == [
        ("phase_begin", None),  # the sanity check, before the first step
        ("phase_end", None),
        ("step_begin", 0),
        ("step_end", 0),
        ("step_begin", 1),
        ("step_end", 1),
        ("phase_begin", 1),
        ("phase_end", 1),
        ("step_begin", 2),
        ("step_end", 2),
        ("step_begin", 3),
        ("step_end", 3),
        ("phase_begin", 3),
        ("phase_end", 3),
    ]


def test_a_batch_without_token_ids_gives_samples_only(run_dir: Path) -> None:
    x = torch.randint(0, VOCAB, (4 * BATCH, SEQ))
    loader = DataLoader(list(zip(x, x.float(), strict=True)), batch_size=BATCH)
    fit(TinyLM(), loader, max_steps=2)
    ends = [m for m in read_markers(run_dir) if m.event == "step_end"]
    assert [m.step for m in ends] == [0, 1]
    assert [m.fields["samples"] for m in ends] == [BATCH, BATCH]
    assert all("tokens" not in m.fields for m in ends)


def test_a_pytorch_lightning_trainer_calls_the_same_callback(run_dir: Path) -> None:
    # The standalone pytorch_lightning package (a copy of lightning.pytorch) calls the
    # hooks by name, so the one callback serves a script that imports either.
    import pytorch_lightning

    class Module(pytorch_lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.tiny = TinyLM()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.tiny.training_step(batch, batch_idx)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return self.tiny.configure_optimizers()

    trainer = pytorch_lightning.Trainer(
        accelerator="cpu",
        max_steps=2,
        accumulate_grad_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RtkMarkersCallback()],
    )
    trainer.fit(Module(), token_batches(4))
    markers = read_markers(run_dir)
    assert markers[0].fields == {"steps_from": "lightning"}
    assert steps(markers) == [(e, n) for n in range(2) for e in ("step_begin", "step_end")]
    ends = [m for m in markers if m.event == "step_end"]
    assert [m.fields["tokens"] for m in ends] == [2 * BATCH * SEQ] * 2


def test_without_rtk_the_callback_writes_nothing(tmp_path: Path) -> None:
    recorder.reset({})
    model = TinyLM()
    fit(model, token_batches(2), max_steps=2)
    assert len(model.losses) == 2
    assert list(tmp_path.iterdir()) == []


def test_batch_counts_reads_token_ids_from_a_dict_or_an_attribute() -> None:
    ids = torch.zeros(3, 5, dtype=torch.long)
    assert batch_counts({"input_ids": ids, "labels": ids}) == (15, 3)
    assert batch_counts({"tokens": ids}) == (15, 3)
    assert batch_counts(SimpleNamespace(input_ids=ids)) == (15, 3)
    assert batch_counts({"ids": ids}, token_keys=("ids",)) == (15, 3)
    assert batch_counts([torch.zeros(7, 2), torch.zeros(7)]) == (None, 7)
    assert batch_counts("text") == (None, None)
