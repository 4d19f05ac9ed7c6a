"""rtk up, exec, preflight and down on 64 to 1,024 simulated nodes: where rtk breaks at scale.

Each command runs as rtk runs it (its click CLI, in a process of its own) against a
``SimulatedCluster`` (``toolkit/simulation/``): only the transport and Ray's
view are simulated; the planner, executor, wait loop, preflight and teardown are rtk's.
The nodes' state goes from one command's process to the next in a JSON file.

Per command it prints: the wall time; the critical path, i.e. the slowest node's own
work with unlimited parallelism (``rtk up``: head probe, files and start + one worker
start + one wait-loop poll); wall / critical path; rtk's CPU seconds (the process's,
less the simulation's own); its peak RSS; and the lines it printed. Model seconds are
slept scaled by ``--scale``: the real seconds are printed, and the model's beside them
(real / scale: CPU and the wait loop's 0.25 s poll are not scaled, so at small scales
they weigh more in model seconds than they would on real nodes).

The inventory's fan-out can be set (``--parallel``, ``--start-wave``,
``--start-wave-interval-s``): ``--parallel 32 --start-wave 32
--start-wave-interval-s 5`` is close to the fixed fan-out of 32 rtk had before.
The child hands the simulated transport to rtk's CLI through ``main(obj=...)``.

    python benchmarks/scale_sim.py [--sizes 64,256,1024] [--scale 0.1]
        [--worker-start-s 5] [--handshake-s 0.2] [--parallel N] [--start-wave N]
        [--start-wave-interval-s S] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from toolkit.inventory.models import (  # noqa: E402
    PARALLEL,
    START_WAVE,
    START_WAVE_INTERVAL_S,
)
from toolkit.simulation import LatencyModel  # noqa: E402

COMMANDS: dict[str, list[str]] = {
    "up": ["up", "{inv}", "--no-preflight", "--timings"],
    "exec": ["exec", "{inv}", "--", "true"],
    "preflight": ["preflight", "{inv}", "--output-dir", "{tmp}/run"],
    "down": ["down", "{inv}"],
}
CHILD_TIMEOUT_S = 1800
TIMINGS_LINES = 6  # rtk up --timings: a header, four phases, the total


def critical_path_s(command: str, m: LatencyModel) -> float:
    """The slowest node's own work for ``command`` in model seconds, with no queueing."""
    call = m.round_trip_s
    if command == "up":
        head = m.handshake_s + call + m.probe_s + 2 * (call + m.put_s) + call + m.head_start_s
        return head + call + m.worker_start_s + call + m.status_s
    if command == "exec":
        return m.handshake_s + call
    if command == "preflight":
        return (m.handshake_s + call + m.status_s) + (m.handshake_s + call + m.facts_s)
    return m.handshake_s + call + m.stop_s


def inventory_file(path: Path, nodes: int, fanout: dict[str, Any]) -> Path:
    """An inventory of ``nodes`` nodes, n0001 (the head) on, with ``fanout``'s settings."""
    data = {
        "cluster": f"sim{nodes}",
        "nodes": [
            {"host": f"n{i:04d}", "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"}
            for i in range(1, nodes + 1)
        ],
        "ray": {
            "wait_timeout_s": 3600,
            "start_timeout_s": 3600,
            "start_wave": fanout["start_wave"],
            # Model seconds, slept scaled like every latency of the model.
            "start_wave_interval_s": fanout["start_wave_interval_s"] * fanout["scale"],
        },
        "fanout": {"parallel": fanout["parallel"]},
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def model_from(args: argparse.Namespace) -> LatencyModel:
    """The latency model the flags give."""
    return LatencyModel(
        handshake_s=args.handshake_s,
        head_start_s=args.head_start_s,
        worker_start_s=args.worker_start_s,
        facts_s=args.facts_s,
        scale=args.scale,
    )


def model_flags(model: LatencyModel) -> list[str]:
    """The flags that give ``model`` to a child."""
    names = ("handshake_s", "head_start_s", "worker_start_s", "facts_s", "scale")
    return [w for n in names for w in (f"--{n.replace('_', '-')}", str(getattr(model, n)))]


# The child: one rtk command in this process, its transport simulated.


def child(args: argparse.Namespace) -> None:
    """Run one rtk command against the saved simulated cluster; write its measurements."""
    from toolkit.cli import TRANSPORT_FACTORY, main
    from toolkit.simulation import SimulatedCluster, SimulatedTransport

    cluster = SimulatedCluster(model_from(args))
    state = Path(args.sim_state)
    if state.exists():
        cluster.load(state)

    def make_transport(inventory: object) -> SimulatedTransport:
        return SimulatedTransport(cluster)

    sys.argv = ["rtk", *args.rtk_args]
    peak_threads = _ThreadCount()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    began = time.monotonic()
    code = 0
    try:
        main(obj={TRANSPORT_FACTORY: make_transport})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    wall_s = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_SELF)
    peak_threads.stop()
    cpu_s = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    cluster.save(state)
    Path(args.metrics).write_text(
        json.dumps(
            {
                "exit_code": code,
                "wall_s": wall_s,
                "cpu_s": cpu_s,
                "sim_cpu_s": cluster.sim_cpu_s,
                "rss_mb": after.ru_maxrss / 1024,
                "threads": peak_threads.peak,
                "connections": cluster.connections,
                "operations": dict(cluster.operations),
            }
        )
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _ThreadCount:
    """The most threads alive at once, sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak = threading.active_count()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            self.peak = max(self.peak, threading.active_count() - 1)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


# The parent: every size, every command, each in a child.


def run_command(
    command: str, inv: Path, tmp: Path, model: LatencyModel, state_dir: Path
) -> dict[str, Any]:
    """Run ``command`` in a child; its measurements and the lines it printed."""
    words = [w.format(inv=inv, tmp=tmp) for w in COMMANDS[command]]
    metrics = tmp / f"{command}.json"
    argv = [
        sys.executable,
        __file__,
        "--child",
        "--sim-state",
        str(tmp / "cluster.json"),
        "--metrics",
        str(metrics),
        *model_flags(model),
        "--",
        *words,
    ]
    env = {**os.environ, "RTK_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S, check=False
    )
    if not metrics.exists():
        raise SystemExit(f"{command} crashed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(metrics.read_text())
    # rtk up's --timings table is the benchmark's, not part of what a user would see.
    stdout = done.stdout.splitlines()
    table = next((i for i, line in enumerate(stdout) if line.startswith("phase ")), len(stdout))
    found["timings_text"] = stdout[table : table + TIMINGS_LINES]
    del stdout[table : table + TIMINGS_LINES]
    found["stdout_lines"] = len(stdout)
    found["stderr_lines"] = len(done.stderr.splitlines())
    found["lines"] = found["stdout_lines"] + found["stderr_lines"]
    found["critical_s"] = critical_path_s(command, model) * model.scale
    found["rtk_cpu_s"] = max(0.0, found["cpu_s"] - found["sim_cpu_s"])
    found["tail"] = (done.stdout + done.stderr).splitlines()[-3:]
    return found


def measure_size(
    nodes: int, model: LatencyModel, commands: list[str], fanout: dict[str, Any]
) -> dict[str, Any]:
    """Every command on a fresh simulated cluster of ``nodes`` nodes."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rtk-scale-sim-") as where:
        tmp = Path(where)
        inv = inventory_file(tmp / "inv.yaml", nodes, fanout)
        for command in commands:
            results[command] = run_command(command, inv, tmp, model, tmp / "state")
            print_row(nodes, command, results[command], model)
            for line in results[command]["timings_text"]:
                print(f"{'':>16}{line}")
    return results


HEADER = (
    f"{'nodes':>5} {'command':<9} {'wall s':>8} {'(model)':>8} {'critical':>8} {'(model)':>8} "
    f"{'ratio':>6} {'rtk CPU s':>9} {'RSS MB':>7} {'threads':>7} {'lines':>6} {'exit':>4}"
)


def print_row(nodes: int, command: str, r: dict[str, Any], model: LatencyModel) -> None:
    """One line of the table."""
    scale = model.scale or 1.0
    print(
        f"{nodes:>5} {command:<9} {r['wall_s']:>8.2f} {r['wall_s'] / scale:>8.1f} "
        f"{r['critical_s']:>8.2f} {r['critical_s'] / scale:>8.1f} "
        f"{r['wall_s'] / r['critical_s']:>5.1f}x {r['rtk_cpu_s']:>9.2f} {r['rss_mb']:>7.0f} "
        f"{r['threads']:>7} {r['lines']:>6} {r['exit_code']:>4}",
        flush=True,
    )


def main() -> None:
    """Parse the flags; run the child or the whole benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    defaults = LatencyModel()
    parser.add_argument("--scale", type=float, default=0.1, help="real s per model s")
    parser.add_argument("--handshake-s", type=float, default=defaults.handshake_s)
    parser.add_argument("--head-start-s", type=float, default=defaults.head_start_s)
    parser.add_argument("--worker-start-s", type=float, default=defaults.worker_start_s)
    parser.add_argument("--facts-s", type=float, default=defaults.facts_s)
    parser.add_argument("--parallel", type=int, default=PARALLEL, help="fanout.parallel")
    parser.add_argument("--start-wave", type=int, default=START_WAVE, help="ray.start_wave")
    parser.add_argument(
        "--start-wave-interval-s",
        type=float,
        default=START_WAVE_INTERVAL_S,
        help="ray.start_wave_interval_s, in model seconds (scaled like the latencies)",
    )
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sim-state", help=argparse.SUPPRESS)
    parser.add_argument("--metrics", help=argparse.SUPPRESS)
    parser.add_argument("rtk_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    model = model_from(args)
    fanout = {
        "parallel": args.parallel,
        "start_wave": args.start_wave,
        "start_wave_interval_s": args.start_wave_interval_s,
        "scale": model.scale,
    }
    print(
        "model (s): "
        + ", ".join(f"{f.name} {getattr(model, f.name):g}" for f in fields(model))
        + "; fan-out: "
        + ", ".join(f"{k} {v:g}" for k, v in fanout.items() if k != "scale")
    )
    print("wall and critical path in real s, (model) = real / scale; ratio = wall / critical")
    print(HEADER)
    everything: dict[str, Any] = {"model": asdict(model), "fanout": fanout}
    for size in (int(s) for s in args.sizes.split(",")):
        everything[str(size)] = measure_size(size, model, args.commands.split(","), fanout)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=2) + "\n")


if __name__ == "__main__":
    main()
