"""Mark your own training's steps, phases and barriers for rtk's power report.

Under rtk (``rtk torchrun``, ``rtk telemetry record``, ``rtk train``) every process
of the job gets ``RTK_RUN_DIR``, and these calls append to its rank's marker file in
the run directory, the same records rtk's own trainer writes; the report lines them
up with every GPU's power. Anywhere else they do nothing, at well under a
microsecond a call, so the script needs no second version::

    from toolkit import markers

    for batch in loader:
        with markers.step(tokens=batch.numel()):
            with markers.phase("forward"):
                loss = model(batch).mean()
            with markers.phase("backward"):
                loss.backward()
            optimizer.step()
        markers.barrier()  # torch.distributed.barrier, and how long this rank waited

Importing this package loads only the standard library; torch and ray are read only
when the script has imported them. See docs/markers.md for the events, the
environment and ``--auto-steps`` (steps counted without editing the script).
"""

from __future__ import annotations

from toolkit.markers.api import (
    barrier,
    begin_phase,
    begin_step,
    enabled,
    end_phase,
    end_step,
    mark,
    phase,
    set_steps_from,
    step,
)

__all__ = [
    "barrier",
    "begin_phase",
    "begin_step",
    "enabled",
    "end_phase",
    "end_step",
    "mark",
    "phase",
    "set_steps_from",
    "step",
]
