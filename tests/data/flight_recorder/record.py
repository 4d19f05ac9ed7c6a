"""Record real Flight Recorder dumps of gloo ranks stuck in a collective, as JSON.

``python tests/data/flight_recorder/record.py`` rewrites ``<scenario>/rank<N>.json``
beside it: three ranks on this machine (gloo, CPU) run three all-reduces, then:

- ``skip``: rank 1 calls a broadcast where the others call their fourth all-reduce;
- ``behind``: rank 2 never calls the fourth all-reduce (it sleeps).

(A fourth all-reduce of another size is no scenario here: gloo aborts the process that
receives too much data, so no rank is left stuck; the size check is tested on these
files' entries, changed.)

Each rank dumps its recorder from a thread (as rtk's marker writer will) once every
rank is stuck, writes the dump, and exits when all three are written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository: rtk's own dump

from toolkit.markers.flight import flight_recorder_dump  # noqa: E402

SCENARIOS = ("skip", "behind")
WORLD = 3


def rank_main(scenario: str, rank: int, port: int) -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    out = HERE / scenario / f"rank{rank}.json"

    def dump_when_stuck() -> None:
        time.sleep(3)
        dump = flight_recorder_dump()  # as a rank under rtk dumps it
        assert dump is not None
        for entry in dump.get("entries", []):
            for key in ("thread_id", "time_created_ns", "time_discovered_started_ns"):
                entry.pop(key, None)  # not read; they only make the files differ run to run
        out.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
        while not all((HERE / scenario / f"rank{r}.json").exists() for r in range(WORLD)):
            time.sleep(0.1)
        os._exit(0)

    threading.Thread(target=dump_when_stuck, daemon=True).start()
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    try:
        if scenario == "skip" and rank == 1:
            dist.broadcast(t, 0)
        elif scenario == "behind" and rank == 2:
            time.sleep(60)
        else:
            dist.all_reduce(t)
    finally:
        time.sleep(60)  # a rank whose peers were dumped and left: held until its own dump


def main() -> None:
    for number, scenario in enumerate(sys.argv[1:] or SCENARIOS):
        (HERE / scenario).mkdir(exist_ok=True)
        for old in (HERE / scenario).glob("rank*.json"):
            old.unlink()
        port = 29600 + number
        ranks = [
            subprocess.Popen([sys.executable, __file__, scenario, str(r), str(port)])
            for r in range(WORLD)
        ]
        for process in ranks:
            process.wait(timeout=300)
        print(scenario, sorted(p.name for p in (HERE / scenario).glob("rank*.json")))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2].isdigit():
        rank_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
