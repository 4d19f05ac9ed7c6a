"""Steps counted without touching the script (``--auto-steps``).

``python -m toolkit.markers.auto_steps SCRIPT [ARGS]`` installs the hooks below and
runs SCRIPT as ``python SCRIPT ARGS`` would (``toolkit.markers.script_runner``);
``rtk torchrun --auto-steps`` starts every rank as
``torchrun ... -m toolkit.markers.auto_steps SCRIPT ARGS``. Without ``RTK_RUN_DIR``
it installs nothing (and does not import torch): the script runs as it is.

The hooks (``AutoSteps``), all global, so no line of the script changes:

- **steps**: torch's global optimizer step hooks. The first optimizer instance whose
  ``step()`` runs is the one counted (a GAN's second optimizer, or a second model's,
  is not); its post hook ends step n and defers step n+1's ``step_begin`` to the next
  activity, so that a checkpoint or an evaluation after the last step is not a step;
- **the next activity**: a one-shot global forward pre-hook, armed at the start and
  after each counted optimizer step, removed at the first module call made with
  gradients on (it costs one call a step, not one per module; an evaluation under
  ``torch.no_grad()`` between steps leaves it armed and begins no step); also a
  backward, or the counted optimizer's own pre hook. Step 0 so begins at the model's
  first training forward;
- **the backward phase**: ``torch.autograd.backward`` (which ``Tensor.backward``
  calls) is wrapped to write ``phase_begin``/``phase_end`` named ``backward`` around
  each outermost call (a backward inside a backward, as reentrant checkpointing
  makes, is not written twice). Under DDP the gradients' all-reduce finishes inside
  it, so a rank that reaches backward late keeps the others waiting there: the
  report reads the step's stragglers from these phases.

``run_start`` says ``steps_from: "auto"``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from toolkit.markers import api, recorder, script_runner

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.optim import Optimizer
    from torch.utils.hooks import RemovableHandle

USAGE = "usage: python -m toolkit.markers.auto_steps SCRIPT [ARGS...] | -m MODULE [ARGS...]"
BACKWARD = "backward"


class AutoSteps:
    """The global hooks that find steps and backward phases in any torch script."""

    def __init__(self) -> None:
        self._counted: weakref.ref[Optimizer] | None = None
        self._forward: RemovableHandle | None = None
        self._handles: list[RemovableHandle] = []
        self._original_backward: Callable[..., Any] | None = None
        self._depth = 0  # backward calls in progress

    def install(self) -> None:
        """Install the hooks (imports torch) and begin step 0 at the next activity."""
        import torch
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        api.set_steps_from("auto")
        self._defer_next_step()
        self._handles += [
            register_optimizer_step_pre_hook(self._before_optimizer_step),
            register_optimizer_step_post_hook(self._after_optimizer_step),
        ]
        original: Callable[..., Any] = torch.autograd.backward
        self._original_backward = original

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            active = recorder.active
            if active is None or self._depth:
                return original(*args, **kwargs)
            self._depth += 1
            active.write("phase_begin", {"name": BACKWARD})
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
                active.write("phase_end", {"name": BACKWARD})

        torch.autograd.backward = backward

    def uninstall(self) -> None:
        """Remove every hook and restore ``torch.autograd.backward``."""
        import torch

        for handle in [*self._handles, *([self._forward] if self._forward else [])]:
            handle.remove()
        self._handles, self._forward = [], None
        if self._original_backward is not None:
            torch.autograd.backward = self._original_backward
            self._original_backward = None

    def _defer_next_step(self) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        active = recorder.active
        if active is not None:
            active.defer_step_begin()
        if self._forward is None:
            self._forward = register_module_forward_pre_hook(self._first_forward)

    def _first_forward(self, module: Module, args: tuple[Any, ...]) -> None:
        import torch

        if not torch.is_grad_enabled():
            return  # evaluation: not the next step's activity
        if self._forward is not None:
            self._forward.remove()  # the module call iterates over a copy of the hooks
            self._forward = None
        active = recorder.active
        if active is not None:
            active.flush_pending()

    def _before_optimizer_step(
        self, optimizer: Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if self._counted is None or self._counted() is None:
            self._counted = weakref.ref(optimizer)  # the first seen (again, if it is gone)
        active = recorder.active
        if active is not None and self._counted() is optimizer:
            active.flush_pending()

    def _after_optimizer_step(
        self, optimizer: Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        active = recorder.active
        if active is None or self._counted is None or self._counted() is not optimizer:
            return
        active.end_step()
        self._defer_next_step()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """``python -m toolkit.markers.auto_steps SCRIPT [ARGS]``: hooks, then the script.

    The script runs and the process ends as under ``toolkit.markers.script_runner``.

    Raises:
        SystemExit: The script's exit status (2 for a usage error or a missing script).
    """
    target = script_runner.parse(sys.argv[1:] if argv is None else argv, USAGE)
    if recorder.active is not None:
        # Load the writer now: the script's folder is about to replace the working
        # directory on sys.path, and rtk may have been importable only from there.
        importlib.import_module("toolkit.rundir.markers")
        try:
            AutoSteps().install()
        except ImportError as e:
            print(f"rtk auto steps: no torch here ({e}); running without them", file=sys.stderr)
    script_runner.run_then_exit(target)


if __name__ == "__main__":
    main()
