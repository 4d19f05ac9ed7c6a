"""A stall's evidence from every rank at once, and the slow-rank watch's cost on the driver.

Starts ``--ranks`` real rank processes on this machine (a small Python each, writing
markers through ``toolkit.markers`` with ``RTK_RUN_DIR`` set, then asleep inside a
``backward`` phase like a rank stuck in its collective; about 10 MB each), spread over
``--fake-nodes`` inventory names (``RTK_NODE``), and times:

- ``node_evidence`` over all of them in this process (a node name no marker has: the
  ranks written on this host, all of them), with py-spy and faulthandler-only;
- ``collect_evidence`` through a local ``ray.init()``: one Ray node asked once for all
  ranks, then the same Ray node asked under each fake node's name (each task reads
  every marker file's tail and takes its own node's ranks);

each with the wall time, ranks per second, the stacks found by source, and the peak
memory: this process's high-water mark or, through Ray, the largest Ray worker's
under this process. Then ``SlowWatch``'s cost
to the driver per tick: every node asked (``ask_every_node``, the node side replaced
by a synthetic answer of 8 ranks x 64 steps, as each real node would send) and the
finding made, at ``--slow-nodes`` fake nodes: the driver's CPU seconds per tick
(``time.process_time``: all its threads, Ray's own included) against the budget of
0.5% of a core at ``slow.INTERVAL_S``. Every rank process is killed at the end, on
Ctrl-C too (and by the kernel if this process dies: ``PR_SET_PDEATHSIG``).

    python benchmarks/stall_collect.py [--ranks 32,256] [--fake-nodes 8] [--repeats 3]
        [--slow-nodes 1,64,256] [--no-ray]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from toolkit.stall.node_evidence import node_evidence
from toolkit.stall.records import NodeEvidence
from toolkit.stall.slow import CPU_SHARE, INTERVAL_S, NodeSteps, RankSteps, find_slow_rank

REPO = Path(__file__).resolve().parents[1]
BUDGET_SHARE = 0.005  # the driver's watchdog: at most 0.5% of a core
READY_TIMEOUT_S = 300.0
RANKS_PER_NODE = 8
RANK_SCRIPT = """\
import time

from toolkit import markers

for _ in range(3):
    with markers.step(tokens=1):
        with markers.phase("forward"):
            pass
        with markers.phase("backward"):
            pass
markers.begin_step()
markers.begin_phase("backward")
print("ready", flush=True)
while True:
    time.sleep(3600)  # stuck in the step's collective
"""
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: the kernel kills it when the benchmark dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def rank_processes(count: int, run_dir: Path, fake_nodes: int) -> Iterator[list[int]]:
    """Start ``count`` ranks (rank r on ``fake{r % fake_nodes}``); their pids once all wait."""
    script = run_dir.parent / "rank.py"
    script.write_text(RANK_SCRIPT)
    started: list[subprocess.Popen[str]] = []
    try:
        for rank in range(count):
            env = {
                **os.environ,
                "RTK_RUN_DIR": str(run_dir),
                "RTK_NODE": f"fake{rank % fake_nodes}",
                "RANK": str(rank),
                "LOCAL_RANK": str(rank // fake_nodes),
                "WORLD_SIZE": str(count),
                "PYTHONPATH": str(REPO),
            }
            started.append(
                subprocess.Popen(
                    [sys.executable, str(script)],
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                    preexec_fn=_die_with_parent,  # only prctl: nothing that takes a lock
                )
            )
        waiting = {p.stdout: p for p in started if p.stdout is not None}
        deadline_s = time.monotonic() + READY_TIMEOUT_S
        while waiting and time.monotonic() < deadline_s:
            ready, _, _ = select.select(list(waiting), [], [], 1.0)
            for stream in ready:
                if stream.readline() != "ready\n":
                    raise RuntimeError(f"rank pid {waiting[stream].pid} did not start")
                del waiting[stream]
        if waiting:
            raise RuntimeError(f"{len(waiting)} ranks not ready in {READY_TIMEOUT_S:g} s")
        yield [p.pid for p in started]
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
        for process in started:
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's ``/proc/PID/status`` memory field, in MB (0: gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stacks_by_source(nodes: list[NodeEvidence]) -> str:
    """``py-spy 250, faulthandler 6`` of the ranks' stacks, and the nodes' errors."""
    sources = Counter(r.stack_source for n in nodes for r in n.ranks)
    errors = [f"{n.node}: {n.error}" for n in nodes if n.error]
    text = ", ".join(f"{source} {count}" for source, count in sorted(sources.items()))
    return text + (f"; errors: {errors[:2]}" if errors else "")


def timed(run: Callable[[], list[NodeEvidence]], repeats: int) -> tuple[float, list[NodeEvidence]]:
    """The best of ``repeats`` runs' seconds, and the last run's answer."""
    best_s, found = float("inf"), []
    for _ in range(repeats):
        started = time.perf_counter()
        found = run()
        best_s = min(best_s, time.perf_counter() - started)
    return best_s, found


def row(what: str, ranks: int, took_s: float, memory: str, found: list[NodeEvidence]) -> None:
    answered = sum(len(n.ranks) for n in found)
    print(
        f"  {what:36s} {ranks:5d} {took_s:8.2f} {answered / took_s:9.0f} {memory:>24s}  "
        f"{answered} ranks: {stacks_by_source(found)}"
    )


def header() -> None:
    print(f"  {'':36s} {'ranks':>5s} {'time s':>8s} {'ranks/s':>9s} {'peak memory MB':>24s}")


def bench_node_evidence(run_dir: Path, ranks: int, repeats: int, stack_timeout_s: float) -> None:
    """``node_evidence`` in this process over every rank, py-spy then faulthandler only."""
    for py_spy in (True, False):
        took_s, found = timed(
            lambda py_spy=py_spy: [node_evidence(str(run_dir), "all", stack_timeout_s, py_spy)],
            repeats,
        )
        self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        what = f"node_evidence, {'py-spy' if py_spy else 'faulthandler only'}"
        row(what, ranks, took_s, f"self {self_mb:.0f}", found)


def bench_collect(
    run_dir: Path, ranks: int, fake_nodes: int, repeats: int, per_node_timeout_s: float
) -> None:
    """``collect_evidence`` over a local Ray: all ranks on one node, then per fake node."""
    import ray

    from toolkit.stall.collect import collect_evidence

    node_id = ray.get_runtime_context().get_node_id()
    for label, nodes in (
        ("one Ray node", {"all": node_id}),
        (f"{fake_nodes} fake nodes on it", {f"fake{k}": node_id for k in range(fake_nodes)}),
    ):
        took_s, found = timed(
            lambda nodes=nodes: collect_evidence(nodes, str(run_dir), per_node_timeout_s),
            repeats,
        )
        workers = [p for p in descendants(os.getpid()) if "ray::" in _cmdline(p)]
        worker_mb = max((rss_mb(p, "VmHWM") for p in workers), default=0.0)
        driver_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        memory = f"driver {driver_mb:.0f}, worker {worker_mb:.0f}"
        row(f"collect_evidence, {label}", ranks, took_s, memory, found)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def synthetic_node(node: int, steps: int = 64, slow_rank: int = 29) -> NodeSteps:
    """A node's answer: 8 ranks' barrier waits at 64 steps; ``slow_rank`` is last at each."""
    ranks = []
    for local in range(RANKS_PER_NODE):
        rank = node * RANKS_PER_NODE + local
        waits = tuple(
            0.0 if rank == slow_rank else 0.4 + (rank * 7 + s) % 13 / 100 for s in range(steps)
        )
        ranks.append(RankSteps(rank, f"node{node:05d}", tuple(range(1000, 1000 + steps)), waits))
    return NodeSteps(f"node{node:05d}", tuple(ranks))


def bench_find(sizes: list[int], repeats: int) -> None:
    """``find_slow_rank`` alone, on the driver, at each number of nodes."""
    print(f"find_slow_rank alone ({RANKS_PER_NODE} ranks x 64 steps a node; best of {repeats}):")
    for nodes in sizes:
        answers = [synthetic_node(n) for n in range(nodes)]
        best_s = float("inf")
        for _ in range(repeats):
            started = time.process_time()
            found = find_slow_rank(answers)
            best_s = min(best_s, time.process_time() - started)
        assert found is not None and found.rank == 29, found
        print(f"  {nodes:6d} nodes: {best_s * 1e3:8.1f} ms CPU")


def bench_slow_watch(sizes: list[int], repeats: int) -> None:
    """A SlowWatch tick's driver CPU through a local Ray, with synthetic node answers."""
    import ray

    from toolkit.stall import slow

    @ray.remote(num_cpus=0)
    def synthetic(run_dir: str, node: str) -> NodeSteps:
        return synthetic_node(int(node[4:]))

    slow._node_steps = synthetic
    node_id = ray.get_runtime_context().get_node_id()
    print(f"SlowWatch tick on the driver (ask every node + find; best of {repeats}):")
    print(f"  {'nodes':>6s} {'wall s':>8s} {'driver CPU ms':>14s} {'share of a core at':>20s}")
    for nodes in sizes:
        names = {f"node{n:05d}": node_id for n in range(nodes)}
        ticks = [0.0, INTERVAL_S]
        slow.ask_every_node("run", names)  # warm: the workers start
        best_cpu_s, best_wall_s, line, answered = float("inf"), float("inf"), None, 0
        for _ in range(repeats):
            watch = slow.SlowWatch("run", ask=lambda names=names: slow.ask_every_node("run", names))
            watch.tick(ticks[0])
            wall, cpu = time.perf_counter(), time.process_time()
            line = watch.tick(ticks[1])
            best_cpu_s = min(best_cpu_s, time.process_time() - cpu)
            best_wall_s = min(best_wall_s, time.perf_counter() - wall)
            answered = watch.answered  # a node late on this busy machine is skipped
        share = best_cpu_s / INTERVAL_S
        met = "met" if share <= BUDGET_SHARE else "MISSED"
        print(
            f"  {nodes:6d} {best_wall_s:8.2f} {best_cpu_s * 1e3:14.1f} "
            f"{share * 100:9.4f}% / {INTERVAL_S:g} s  (budget {BUDGET_SHARE * 100:g}%: {met}); "
            f"{answered} answered; next ask in {max(INTERVAL_S, best_cpu_s / CPU_SHARE):.0f} s"
        )
    print(f"  the line: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="32,256")
    parser.add_argument("--fake-nodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stack-timeout-s", type=float, default=2.0)
    parser.add_argument("--per-node-timeout-s", type=float, default=60.0)
    parser.add_argument("--slow-nodes", default="1,64,256")
    parser.add_argument("--find-nodes", default="64,1000,4000")
    parser.add_argument("--no-ray", action="store_true", help="node_evidence and find only")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # cleans up as Ctrl-C does
    if not args.no_ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        for count in [int(n) for n in args.ranks.split(",") if int(n) > 0]:
            with tempfile.TemporaryDirectory(prefix="rtk-stall-bench-") as tmp:
                run_dir = Path(tmp) / "run"
                started = time.monotonic()
                with rank_processes(count, run_dir, args.fake_nodes) as pids:
                    ranks_mb = sum(rss_mb(pid) for pid in pids)
                    print(
                        f"{count} ranks started in {time.monotonic() - started:.1f} s, "
                        f"{ranks_mb:.0f} MB together ({ranks_mb / count:.1f} MB each); "
                        f"best of {args.repeats}:"
                    )
                    header()
                    bench_node_evidence(run_dir, count, args.repeats, args.stack_timeout_s)
                    if not args.no_ray:
                        bench_collect(
                            run_dir, count, args.fake_nodes, args.repeats, args.per_node_timeout_s
                        )
        bench_find([int(n) for n in args.find_nodes.split(",")], args.repeats)
        if not args.no_ray:
            bench_slow_watch([int(n) for n in args.slow_nodes.split(",")], args.repeats)
    finally:
        if not args.no_ray:
            import ray

            ray.shutdown()


if __name__ == "__main__":
    main()
