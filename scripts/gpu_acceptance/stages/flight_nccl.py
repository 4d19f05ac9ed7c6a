"""Stage flight-nccl: PyTorch's Flight Recorder on NCCL, read as rtk reads it on a stall.

``gpu_acceptance.nccl_flight`` runs one NCCL rank on GPU 0 with the recorder on (rtk's
``TORCH_FR_BUFFER_SIZE``), dumps it through rtk's own ``flight_recorder_dump`` and asks
NCCL's RAS when its client is there. Here rtk's reading of that dump
(``toolkit.stall.flight.collectives.rank_collectives``) is recorded beside the dump
itself: the collectives it found, entered and finished per group (NCCL tracks each
one's completion, gloo does not), their ops and sizes. The dump and the RAS answer go
into the stage's record whole: they are the recorded fixtures the CPU tests of the
NCCL path need (a hang needs two GPUs; one shows the format).
"""

from __future__ import annotations

import json
from typing import Any

from gpu_acceptance import procs
from gpu_acceptance.context import StageContext

RESULT = "nccl-flight.json"


def probe(ctx: StageContext) -> list[str]:
    """The probe's command line."""
    return [ctx.python, "-m", "gpu_acceptance.nccl_flight", str(ctx.work_dir / RESULT)]


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        "one NCCL rank on GPU 0 with the Flight Recorder on: 6 all_reduces, a broadcast, one "
        "left in flight; rtk's dump and its reading of it (entered, finished, ops, sizes), "
        "and ncclras -f json when the client is on PATH; both kept as fixtures"
    )


def reading(dump: dict[str, Any]) -> dict[str, Any]:
    """What rtk reads from a dump: per group, entered and finished; each collective."""
    from toolkit.stall.flight.collectives import rank_collectives

    found = rank_collectives(0, dump)
    return {
        "entered": dict(found.entered),
        "finished": dict(found.finished),
        "members": {g: list(r) for g, r in found.members.items()},
        "collectives": [c.to_json() for c in found.collectives],
    }


def run(ctx: StageContext, io: Any) -> None:
    """Run the probe; record its dump, rtk's reading and RAS's answer."""
    if not ctx.has("torch") or not ctx.gpus:
        raise io.skip("needs torch with CUDA and a GPU")
    done = procs.run(probe(ctx), 120, env=ctx.env(TORCH_FR_BUFFER_SIZE="500"))
    io.measure("seconds", round(done.duration_s, 2))
    path = ctx.work_dir / RESULT
    if done.rc != 0 or not path.exists():
        io.error(f"the probe failed: {procs.last_line(done.stderr or done.stdout)}")
        return
    answer = json.loads(path.read_text())
    io.measure("nccl_version", answer.get("nccl_version"))
    io.measure("dump", answer.get("dump"))
    io.measure("ras", answer.get("ras"))
    read = reading(answer["dump"])
    io.measure("rtk_reading", read)
    ops = [c["op"] for c in read["collectives"]]
    ras = answer.get("ras") or {}
    io.summary(
        f"NCCL {answer.get('nccl_version')}: rtk read {len(ops)} collectives "
        f"({', '.join(sorted(set(ops)))}); entered {read['entered']}, finished "
        f"{read['finished']}; RAS: {'answered' if 'stdout' in ras else ras.get('error')}"
    )
    if read["entered"].get("0", 0) < 7:
        io.error(f"expected 7 or more collectives in group 0, read {read['entered']}")
