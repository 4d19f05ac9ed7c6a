"""Following a Ray job's log: rtk's stream against the previous whole-log poll, same run.

One job prints --mb MB of log lines over --seconds seconds on `rtk up --local`; it is
followed twice, once per way, each time a fresh job:

- poll (the previous implementation): every second, `get_job_logs` (the whole log)
  and print what it has grown by; once more at the end.
- stream (rtk's `LogFollower`): `tail_job_logs`, reopened if it stops, one fetch at
  the end only if the stream missed something.

Printed: characters taken from Ray, CPU seconds of this process, and wall seconds from
submission to the end, with the ratio poll/stream. Run by hand:
    python benchmarks/job_logs.py [--mb 50] [--seconds 10]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from toolkit.cluster.plan import build_plan
from toolkit.inventory import default_inventory
from toolkit.jobs.client import TERMINAL, job_client
from toolkit.jobs.logtail import LogFollower
from toolkit.state.store import StateStore

LINE_CHARS = 100


def printer(mb: float, seconds: float) -> str:
    lines = int(mb * 1e6 / LINE_CHARS)
    bursts = max(1, int(seconds))
    return (
        "import sys, time\n"
        f"for i in range({lines}):\n"
        f"    sys.stdout.write('x' * {LINE_CHARS - 1} + '\\n')\n"
        f"    if i % {max(1, lines // bursts)} == 0: sys.stdout.flush(); time.sleep(1)\n"
    )


def status(client: Any, job_id: str) -> str:
    return str(client.get_job_status(job_id)).rsplit(".", 1)[-1]


def follow_by_polling(client: Any, job_id: str, echo: Callable[[str], None]) -> int:
    """The previous loop: the whole log every second. Returns characters fetched."""
    printed = fetched = 0
    while True:
        done = status(client, job_id) in TERMINAL
        logs = client.get_job_logs(job_id)
        fetched += len(logs)
        if logs[printed:]:
            echo(logs[printed:])
        printed = len(logs)
        if done:
            return fetched
        time.sleep(1.0)


def follow_by_streaming(client: Any, job_id: str, echo: Callable[[str], None]) -> int:
    """rtk's follower. Returns characters taken from Ray."""
    follower = LogFollower(client, job_id, echo)
    while status(client, job_id) not in TERMINAL:
        follower.poll(1.0, lambda: status(client, job_id) not in TERMINAL)
    follower.finish()
    return follower.received_chars


def measure(client: Any, entrypoint: str, way: str) -> dict[str, float]:
    received = {"chars": 0}

    def echo(text: str) -> None:
        received["chars"] += text.count("x")  # the job's own characters

    began_wall, began_cpu = time.perf_counter(), time.process_time()
    job_id = client.submit_job(entrypoint=entrypoint, submission_id=f"bench-{way}-{time.time()}")
    follow = follow_by_polling if way == "poll" else follow_by_streaming
    fetched = follow(client, job_id, echo)
    return {
        "fetched_chars": fetched,
        "printed_chars": received["chars"],
        "cpu_s": time.process_time() - began_cpu,
        "wall_s": time.perf_counter() - began_wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="rtk-bench-state-")
    atexit.register(shutil.rmtree, state, True)
    os.environ["RTK_STATE_DIR"] = state
    rtk = [sys.executable, "-m", "toolkit"]
    subprocess.run([*rtk, "up", "--local", "--no-preflight"], check=True, capture_output=True)
    atexit.register(subprocess.run, [*rtk, "down", "--local"], capture_output=True)
    inv = default_inventory()
    plan = build_plan(inv)
    client = job_client(plan, StateStore(inv.name))
    entrypoint = f"{plan.head.node.python} -c {shlex.quote(printer(args.mb, args.seconds))}"
    results = {way: measure(client, entrypoint, way) for way in ("poll", "stream")}
    print(f"job log of {args.mb:g} MB over about {args.seconds:g} s, rtk up --local")
    print(f"{'':16}{'poll (before)':>16}{'stream (rtk)':>16}{'poll/stream':>14}")
    for key in ("fetched_chars", "cpu_s", "wall_s"):
        poll, stream = results["poll"][key], results["stream"][key]
        ratio = poll / stream if stream else float("inf")
        print(f"{key:16}{poll:16.3g}{stream:16.3g}{ratio:14.2f}")
    same = results["poll"]["printed_chars"] == results["stream"]["printed_chars"]
    print(f"both printed the job's {results['stream']['printed_chars']:.0f} chars: {same}")


if __name__ == "__main__":
    main()
