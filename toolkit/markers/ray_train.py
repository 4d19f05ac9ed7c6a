"""rtk's markers from a Ray Train ``train_loop_per_worker``: wrap the batch loop.

Ray Train has no step hook of its own: the loop is the user's. ``StepMarkers.over``
wraps the loop's iterable so that each batch is one step, and ``report`` wraps
``ray.train.report`` in a phase. Run the script under ``rtk telemetry record`` and every
worker on every node writes its rank's markers; without rtk nothing is written::

    import ray.train
    from toolkit.markers.ray_train import StepMarkers, report

    def train_loop_per_worker(config):
        model = ray.train.torch.prepare_model(build_model())
        loader = ray.train.torch.prepare_data_loader(build_loader())
        steps = StepMarkers()
        for epoch in range(config["epochs"]):
            for batch in steps.over(loader, tokens=lambda b: b["input_ids"].numel()):
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                steps.loss(loss.item())  # optional: the step's loss
            report({"epoch": epoch, "loss": loss.item()})

What it writes (``run_start`` says ``steps_from="ray_train"``; the rank is the
worker's, from torch.distributed or Ray Train's context):

- ``step_begin`` when the loop gets a batch, ``step_end`` when it asks for the next
  one (or leaves the loop: ``break``, the end, an exception), numbered on across
  ``over`` calls from ``first_step``; ``tokens``, ``samples`` from the functions given,
  ``loss`` from ``StepMarkers.loss``. Fetching a batch falls between steps.
- ``phase_begin``/``phase_end`` around ``ray.train.report``: named ``report``, or
  ``checkpoint`` when a checkpoint goes with it (Ray Train persists it then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import ray.train

from toolkit import markers

STEPS_FROM = "ray_train"
REPORT = "report"
CHECKPOINT = "checkpoint"

Batch = TypeVar("Batch")


class StepMarkers:
    """Numbers a worker's steps and writes their markers, one batch a step."""

    def __init__(self, first_step: int = 0) -> None:
        """Steps from ``first_step`` on (a resumed run passes where it stopped).

        Says ``steps_from="ray_train"``: create it before anything writes a marker.
        """
        markers.set_steps_from(STEPS_FROM)
        self.next_step = first_step
        self._loss: float | None = None

    def over(
        self,
        batches: Iterable[Batch],
        *,
        tokens: Callable[[Batch], int] | None = None,
        samples: Callable[[Batch], int] | None = None,
    ) -> Iterator[Batch]:
        """Yield ``batches``' items, each as one step.

        Args:
            batches: The loop's data (a DataLoader, a Ray Data iterator, ...).
            tokens: This rank's tokens in a batch (called only when markers are on).
            samples: This rank's samples in a batch (likewise).
        """
        for batch in batches:
            step = self.next_step
            self.next_step = step + 1
            self._loss = None
            markers.begin_step(step)
            try:
                yield batch
            finally:
                on = markers.enabled()
                markers.end_step(
                    step,
                    tokens=tokens(batch) if on and tokens is not None else None,
                    samples=samples(batch) if on and samples is not None else None,
                    loss=self._loss,
                )

    def loss(self, value: float) -> None:
        """Give the current step's loss (a number: ``loss.item()``), for its ``step_end``."""
        self._loss = float(value)


def report(
    metrics: dict[str, Any], checkpoint: ray.train.Checkpoint | None = None, **options: Any
) -> None:
    """``ray.train.report(metrics, checkpoint, **options)``, marked as a phase.

    The phase is ``checkpoint`` when ``checkpoint`` is given, else ``report``; it holds
    the wait for the other workers that Ray Train's report may make.
    """
    with markers.phase(CHECKPOINT if checkpoint is not None else REPORT):
        ray.train.report(metrics, checkpoint=checkpoint, **options)
