"""rtk's markers from a Hugging Face ``transformers.Trainer``: one callback, no other edit.

Add the callback and run the script under rtk (``rtk torchrun``, ``rtk telemetry
record``); without rtk it writes nothing::

    from transformers import Trainer, TrainingArguments
    from toolkit.markers.hf import RtkMarkersCallback

    args = TrainingArguments(output_dir="out", include_num_input_tokens_seen=True)
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[RtkMarkersCallback()])
    trainer.train()

What it writes (``run_start`` says ``steps_from="hf"``):

- ``step_begin``/``step_end`` for every optimizer step (``on_step_begin`` and
  ``on_step_end``; with gradient accumulation a step spans its micro-batches), step n
  being ``state.global_step`` when it began, so a resumed run goes on numbering.
- ``tokens`` on ``step_end`` when ``include_num_input_tokens_seen`` is on ("all" or
  "non_padding"): the growth of ``state.num_input_tokens_seen`` from the previous
  step's end to this one's (some releases count a step's first micro-batch before
  ``on_step_begin``, so the count is taken end to end). The Trainer sums that count
  over all processes, so each rank writes its share (the sum over ranks is the step's
  total; exact per rank when every rank's batches hold as many tokens). When it is
  off (the Trainer's default) no tokens are written: the callback sees no batches.
- ``loss`` on the steps the Trainer logs (``logging_steps``): the logged training
  loss, the mean since the previous log. On such a step ``step_end`` is written when
  the log is (``on_log``, just after ``on_step_end``), so it carries the loss.
- ``phase_begin``/``phase_end`` named ``eval`` around the evaluations the Trainer runs
  while it trains (``eval_strategy``), and ``checkpoint`` around its checkpoint
  saves. Not marked: an evaluation called by hand (``trainer.evaluate()``), and a
  save decided after the evaluation (``save_strategy="best"``): the callback API
  shows neither one's beginning.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from toolkit import markers

STEPS_FROM = "hf"
EVAL = "eval"
CHECKPOINT = "checkpoint"


class RtkMarkersCallback(TrainerCallback):
    """Writes rtk's step, token, loss and phase markers from the Trainer's events."""

    def __init__(self) -> None:
        """A callback for ``Trainer(callbacks=[...])``; it says ``steps_from="hf"``."""
        markers.set_steps_from(STEPS_FROM)
        self._tokens_seen: int | None = None  # num_input_tokens_seen at the last step's end
        self._unwritten_end: tuple[int, int | None] | None = None  # (step, tokens) awaiting on_log
        self._phases_next: list[str] = []  # what the Trainer does after this step
        self._phase: str | None = None  # the phase open now

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Note the token count training starts from (a resumed run's is restored)."""
        self._tokens_seen = state.num_input_tokens_seen if _counts_tokens(args) else None

    def on_step_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Begin step ``state.global_step``."""
        self._write_unwritten_end(None)
        self._end_phase()
        markers.begin_step(state.global_step)

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """End the step (or leave it to ``on_log``, when the Trainer logs this step)."""
        tokens = None
        if self._tokens_seen is not None:
            tokens = _rank_share(
                state.num_input_tokens_seen - self._tokens_seen, args.process_index, args.world_size
            )
            self._tokens_seen = state.num_input_tokens_seen
        # The flow callback (first in the Trainer's list) has decided what follows.
        self._phases_next = [
            name
            for name, due in ((EVAL, control.should_evaluate), (CHECKPOINT, control.should_save))
            if due
        ]
        self._unwritten_end = (state.global_step - 1, tokens)
        if not control.should_log:
            self._write_unwritten_end(None)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Write the step's end with the logged training loss."""
        loss = (logs or {}).get("loss")
        self._write_unwritten_end(loss if isinstance(loss, int | float) else None)

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """End the ``eval`` phase; a checkpoint save may follow."""
        if self._phase == EVAL:
            self._end_phase()
            self._begin_next_phase()

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """End the ``checkpoint`` phase."""
        if self._phase == CHECKPOINT:
            self._end_phase()

    def on_epoch_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Begin the evaluation or save the Trainer runs at the epoch's end."""
        self._write_unwritten_end(None)
        self._end_phase()
        self._phases_next = [
            name
            for name, due in ((EVAL, control.should_evaluate), (CHECKPOINT, control.should_save))
            if due
        ]
        self._begin_next_phase()

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Write what is still unwritten."""
        self._write_unwritten_end(None)
        self._end_phase()
        self._phases_next = []

    def _write_unwritten_end(self, loss: float | None) -> None:
        if self._unwritten_end is None:
            return
        step, tokens = self._unwritten_end
        self._unwritten_end = None
        markers.end_step(step, tokens=tokens, loss=loss)
        self._begin_next_phase()

    def _begin_next_phase(self) -> None:
        if self._phase is None and self._phases_next:
            self._phase = self._phases_next.pop(0)
            markers.begin_phase(self._phase)

    def _end_phase(self) -> None:
        if self._phase is not None:
            markers.end_phase(self._phase)
            self._phase = None


def _counts_tokens(args: TrainingArguments) -> bool:
    """Whether the Trainer counts input tokens ("all", "non_padding"; True in older releases)."""
    setting = getattr(args, "include_num_input_tokens_seen", "no")
    return setting not in ("no", False, None)


def _rank_share(total: int, rank: int, world_size: int) -> int:
    """Rank ``rank``'s part of ``total`` split over ``world_size`` ranks (the parts sum to it)."""
    size = max(world_size, 1)
    share, left = divmod(int(total), size)
    return share + (1 if rank < left else 0)
