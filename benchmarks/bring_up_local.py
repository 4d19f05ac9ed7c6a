"""Time `rtk up --local` against a bare `ray start --head` on this machine, same run."""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from common import bare_ray_start

from toolkit.cluster.plan import build_plan
from toolkit.inventory import default_inventory
from toolkit.node.agent import stop

BARE_DIR = "/tmp/rtk-bench-bare"


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - began


def bare_start_command() -> str:
    head = build_plan(default_inventory()).head
    return bare_ray_start(head, BARE_DIR, "127.0.0.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--with-ray-stop",
        action="store_true",
        help="also time `ray stop` (it stops EVERY Ray on this machine)",
    )
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="rtk-bench-state-")
    atexit.register(shutil.rmtree, state, True)
    env = {**os.environ, "RTK_STATE_DIR": state}
    bare_env = {**env, "RAY_AUTH_MODE": "disabled", "RTK_CLUSTER_DIR": BARE_DIR}
    rtk = [sys.executable, "-m", "toolkit"]
    times: dict[str, list[float]] = {
        "ray start --head": [],
        "rtk up --local": [],
        "rtk down --local": [],
        "ray stop": [],
    }
    for i in range(args.repeats):
        times["ray start --head"].append(timed(["bash", "-c", bare_start_command()], bare_env))
        if args.with_ray_stop:
            times["ray stop"].append(timed([*rtk[:1], "-m", "ray.scripts.scripts", "stop"], env))
        else:
            stop(BARE_DIR, "8")
        times["rtk up --local"].append(timed([*rtk, "up", "--local"], env))
        times["rtk down --local"].append(timed([*rtk, "down", "--local"], env))
        print(
            f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v),
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in times.items() if v}
    print()
    for name, value in med.items():
        print(f"{name:<18} median {value:6.2f} s over {len(times[name])} run(s)")
    print(
        f"ratio rtk up --local / ray start --head = "
        f"{med['rtk up --local'] / med['ray start --head']:.2f} "
        "(rtk also probes, writes token and env file, and waits until the node is alive)"
    )
    if "ray stop" in med:
        print(
            f"ratio rtk down --local / ray stop = {med['rtk down --local'] / med['ray stop']:.2f}"
        )


if __name__ == "__main__":
    main()
