"""rtk's markers from a Lightning ``Trainer``: one callback, no other edit.

Add the callback and run the script under rtk (``rtk torchrun``, ``rtk telemetry
record``); without rtk it writes nothing and costs nothing::

    import lightning as L
    from toolkit.markers.lightning import RtkMarkersCallback

    trainer = L.Trainer(max_steps=1000, callbacks=[RtkMarkersCallback()])
    trainer.fit(model, train_loader)

A ``pytorch_lightning.Trainer`` (the standalone package) takes the same callback: it
calls the hooks by name.

What it writes (``run_start`` says ``steps_from="lightning"``):

- ``step_begin``/``step_end`` for every optimizer step: a step begins at the train
  batch that starts it and ends at the train batch after which ``trainer.global_step``
  has moved, so with ``accumulate_grad_batches=k`` a step spans its k batches. Step n
  is ``trainer.global_step`` when it began (a resumed run goes on numbering).
- ``tokens`` and ``samples`` on ``step_end``: summed over the step's batches, from
  the batch's ``input_ids`` (else ``tokens``) tensor, a key of a dict batch or an
  attribute: its element count and its first dimension. A batch without one gives
  ``samples`` only (Lightning's own batch-size guess), no tokens.
- ``loss`` on ``step_end``: the mean of the training_step losses of the step's
  batches, read once per step (one device synchronisation per optimizer step; pass
  ``record_loss=False`` to skip it).
- ``phase_begin``/``phase_end`` named ``eval`` around each validation run (the
  sanity check included). Checkpoint saves are not marked: Lightning's callback API
  shows their beginning only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.data import extract_batch_size

from toolkit import markers

STEPS_FROM = "lightning"
EVAL = "eval"
TOKEN_KEYS = ("input_ids", "tokens")


class RtkMarkersCallback(Callback):
    """Writes rtk's step, token and validation markers from Lightning's hooks."""

    def __init__(self, token_keys: Sequence[str] = TOKEN_KEYS, record_loss: bool = True) -> None:
        """A callback for ``Trainer(callbacks=[...])``; it says ``steps_from="lightning"``.

        Args:
            token_keys: Where a batch holds its token ids (dict keys or attributes),
                tried in order.
            record_loss: Write each step's mean loss (reads it from the device once a step).
        """
        markers.set_steps_from(STEPS_FROM)
        self._token_keys = tuple(token_keys)
        self._record_loss = record_loss
        self._step: int | None = None  # the step begun and not ended
        self._tokens: int | None = None
        self._samples: int | None = None
        self._loss_sum: torch.Tensor | None = None
        self._losses = 0

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Begin a step at its first batch; count the batch's tokens and samples."""
        if not markers.enabled():
            return
        if self._step is None:
            self._step = trainer.global_step
            self._tokens = self._samples = self._loss_sum = None
            self._losses = 0
            markers.begin_step(self._step)
        tokens, samples = batch_counts(batch, self._token_keys)
        if tokens is not None:
            self._tokens = (self._tokens or 0) + tokens
        if samples is not None:
            self._samples = (self._samples or 0) + samples

    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: torch.Tensor | Mapping[str, Any] | None,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """End the step once the optimizer has stepped."""
        if self._step is None:
            return
        if self._record_loss:
            self._add_loss(outputs, trainer, pl_module)
        if trainer.global_step > self._step:
            self._end_step()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """End a step cut short (training stopped between its batches)."""
        if self._step is not None:
            self._end_step()

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Begin the ``eval`` phase."""
        markers.begin_phase(EVAL)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """End the ``eval`` phase."""
        markers.end_phase(EVAL)

    def _add_loss(
        self,
        outputs: torch.Tensor | Mapping[str, Any] | None,
        trainer: Trainer,
        pl_module: LightningModule,
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            return
        loss = loss.detach()
        if pl_module.automatic_optimization:
            # Lightning hands on the loss divided by accumulate_grad_batches.
            loss = loss * trainer.accumulate_grad_batches
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._losses += 1

    def _end_step(self) -> None:
        loss = None
        if self._loss_sum is not None and self._losses:
            loss = float(self._loss_sum.item()) / self._losses
        markers.end_step(self._step, tokens=self._tokens, samples=self._samples, loss=loss)
        self._step = None


def batch_counts(
    batch: Any, token_keys: Sequence[str] = TOKEN_KEYS
) -> tuple[int | None, int | None]:
    """(tokens, samples) of one batch; None for what it does not show.

    The first of ``token_keys`` that the batch holds as a tensor (a dict key, else an
    attribute) gives both: its element count and its first dimension. Without one,
    samples come from Lightning's batch-size guess (the first tensor's length).
    """
    for key in token_keys:
        ids = batch.get(key) if isinstance(batch, Mapping) else getattr(batch, key, None)
        if isinstance(ids, torch.Tensor):
            return ids.numel(), (int(ids.shape[0]) if ids.dim() else 1)
    try:
        return None, extract_batch_size(batch)
    except (MisconfigurationException, RecursionError):
        return None, None
