"""Submission to the first training step under SLURM: rtk's batch job vs Ray's template.

On one namespace sandbox with real SLURM (3 nodes, created here and removed at the
end), each run submits two batch jobs that do the same work, a 20-step tiny GPT with
Ray Train on 3 gloo workers, one per node:

- rtk: the script `rtk sbatch render --template train` writes: `rtk train --slurm
  --up` (one process brings Ray up and trains; its local driver starts once the head
  has its env file and imports while the nodes join, held at a gate until the
  cluster is up), then `rtk down --slurm`.
- rtk-2p (with --compare-split): the same script as it was before `--up`, two
  processes: `rtk up --slurm --no-preflight`, then `rtk train --slurm` (the previous
  implementation, measured in the same run).
- ray: Ray's documented SLURM template (slurm-basic.sh, see RAY_TEMPLATE): the head
  started as an srun step, `sleep 10`, each worker as an srun step followed by
  `sleep 5`, then the training program run directly in the batch script: rtk's own
  job entrypoint, `python -m toolkit.train.job CONFIG`, so both train the same way.

Telemetry is off on both sides (`--no-telemetry`; Ray's nodes lack the per-host
resources rtk's samplers pin to). rtk's separate preflight step is skipped by default
(`--rtk-preflight skip`, as Ray's template checks nothing); the quick checks inside
`rtk up` itself still run and are counted.

Times run from just before `sbatch` (the scripts are rendered beforehand) to the first
`step 1/` line in the job's output file, to rtk's "cluster ... is up" line (for Ray:
to the end of its sleeps, where the template hands over to the program), to the
driver's start (rtk's line as it starts it: with `--up` that comes before "up"), and
to the job's terminal state in `scontrol`. The order alternates between runs. Between jobs
every node must be idle in SLURM with no Ray process left (`pgrep`); a leftover is
reported and killed by PID.

Needs root (the sandbox), Debian's slurm-wlm and munge. Run by hand:
    python benchmarks/slurm_bringup.py [--repeats 2] [--rtk-preflight skip|record|enforce]
        [--compare-split]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from toolkit.inventory import load_inventory
from toolkit.sandbox import Sandbox, create
from toolkit.slurm.submit import parse_submit_output, query_job
from toolkit.train.config import TrainConfig

NAME = "sbbench"
SUBNET = "10.77.40"
NODES = 3
# Every sandbox node sees the host's /var/tmp (each node's /tmp is its own).
SHARED_ROOT = "/var/tmp"
POLL_S = 0.1
STATE_POLL_S = 0.5
FIRST_STEP = re.compile(r"\bstep 1/\d+")
RTK_UP = re.compile(r"^cluster \S+ is up", re.MULTILINE)
# rtk train's line as it starts the driver (--driver local, the default in a batch job).
RTK_DRIVER = "here, on the head, as a local process"
RAY_HANDOVER = "ray-template: workers started"
# Ray's daemons and workers, as `pgrep -f` patterns.
RAY_PROCESSES = "raylet|gcs_server|ray::|ray/dashboard|ray/_private"

# Ray's documented SLURM template, reproduced for its timing only. Source:
# https://docs.ray.io/en/latest/cluster/vms/user-guides/community/slurm.html, whose script
# is doc/source/cluster/doc_code/slurm-basic.sh in github.com/ray-project/ray. Kept from
# it: the head's address from `hostname --ip-address` in an srun step on the first node;
# one `srun --nodes=1 --ntasks=1 -w NODE ray start ... --block &` step per node, the head
# on Ray's default port 6379 without token auth; `sleep 10` after the head and `sleep 5`
# after each worker; then the program, run straight from the batch script on the head;
# no teardown (SLURM ends the steps when the script exits). Changed for the sandbox: the
# nodes have 2 CPUs and no GPUs, so `--cpus-per-task` is 2 and `--num-gpus` is left out;
# a per-job --temp-dir; `ray` and the program use the inventory's Python; RAY_ADDRESS is
# exported for the program's `ray.init()`; Ray Train's print patch is off, as rtk's job
# has it (otherwise each step line is printed twice); a marker line after the sleeps.
RAY_TEMPLATE = """#!/bin/bash
#SBATCH --job-name=ray-template
#SBATCH --nodes={nodes}
#SBATCH --tasks-per-node=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --output=ray-%j.out

nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
nodes_array=($nodes)
head_node=${{nodes_array[0]}}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)

port=6379
ip_head=$head_node_ip:$port
echo "IP Head: $ip_head"
temp_dir=/tmp/ray-tpl-$SLURM_JOB_ID
# Not in Ray's template, which predates token auth: Ray 2.60 turns it on by itself
# when a token file is found in the home directory, and the workers then lack it.
export RAY_AUTH_MODE=disabled

echo "Starting HEAD at $head_node"
srun --nodes=1 --ntasks=1 -w "$head_node" \\
  {ray} start --head --node-ip-address="$head_node_ip" --port=$port \\
  --num-cpus "$SLURM_CPUS_PER_TASK" --temp-dir="$temp_dir" --block &
sleep 10

worker_num=$((SLURM_JOB_NUM_NODES - 1))
for ((i = 1; i <= worker_num; i++)); do
  node_i=${{nodes_array[$i]}}
  echo "Starting WORKER $i at $node_i"
  srun --nodes=1 --ntasks=1 -w "$node_i" \\
    {ray} start --address "$ip_head" \\
    --num-cpus "$SLURM_CPUS_PER_TASK" --temp-dir="$temp_dir" --block &
  sleep 5
done
echo "{handover} $(date +%T)"

export RAY_ADDRESS=$ip_head RAY_TRAIN_ENABLE_PRINT_PATCH=0
{python} -u -m toolkit.train.job {config}
"""


@dataclass
class Timing:
    """One job's times, in seconds from just before sbatch."""

    tool: str
    job_id: str
    up_s: float | None
    driver_s: float | None  # the driver starts (ray: the handover, as up)
    first_step_s: float | None
    total_s: float
    state: str


def train_args(max_steps: int) -> list[str]:
    return ["--model-size", "tiny", "--max-steps", str(max_steps), "--num-workers", str(NODES)]


def render_rtk(
    inventory: Path, submit_dir: Path, env: dict[str, str], args: argparse.Namespace
) -> Path:
    path = submit_dir / "rtk.sbatch"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit",
            "sbatch",
            "render",
            str(inventory),
            "--template",
            "train",
            "--job-output",
            "rtk-%j.out",
            "--preflight",
            args.rtk_preflight,
            "-o",
            str(path),
            "--",
            *train_args(args.max_steps),
            "--no-telemetry",
        ],
        env=env,
        cwd=submit_dir,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return path


def render_split(rtk_script: Path) -> Path:
    """``rtk_script`` as the train template was before ``rtk train --up``: two processes."""
    text = rtk_script.read_text()
    one = 'rtk_run "${RTK[@]}" train --slurm "$RTK_INVENTORY" --up '
    if one not in text:
        raise RuntimeError(f"{rtk_script} has no `rtk train --up` line to split")
    two = (
        'rtk_run "${RTK[@]}" up --slurm "$RTK_INVENTORY" --no-preflight\n'
        'rtk_run "${RTK[@]}" train --slurm "$RTK_INVENTORY" '
    )
    path = rtk_script.with_name("rtk-2p.sbatch")
    path.write_text(text.replace(one, two).replace("rtk-%j.out", "rtk-2p-%j.out"))
    return path


def render_ray(inventory: Path, submit_dir: Path, run: int, max_steps: int) -> Path:
    python = load_inventory(inventory).head.python
    config = TrainConfig(
        run_dir=str(submit_dir / "ray-runs" / f"run{run}"),
        model_size="tiny",
        max_steps=max_steps,
        num_workers=NODES,
        telemetry=False,
    ).check()
    script = RAY_TEMPLATE.format(
        nodes=NODES,
        cpus=2,
        ray=shlex.quote(str(Path(python).parent / "ray")),
        python=shlex.quote(python),
        config=shlex.quote(json.dumps(config.to_json())),
        handover=RAY_HANDOVER,
    )
    path = submit_dir / f"ray-{run}.sbatch"
    path.write_text(script)
    return path


def time_job(
    tool: str, script: Path, submit_dir: Path, env: dict[str, str], limit_s: float
) -> tuple[Timing, str]:
    """Submit ``script`` and watch its output until SLURM says it ended."""
    began = time.perf_counter()
    done = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        env=env,
        cwd=submit_dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = parse_submit_output(done.stdout)
    output = submit_dir / f"{tool}-{job_id}.out"
    up_s = driver_s = first_step_s = None
    next_query = 0.0
    text = ""
    while True:
        now = time.perf_counter()
        if now - began > limit_s:
            subprocess.run(["scancel", job_id], env=env, check=False, timeout=30)
            raise RuntimeError(f"{tool} job {job_id} still running after {limit_s:g} s")
        try:
            text = output.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        marker = RTK_UP.search(text) if tool != "ray" else re.search(RAY_HANDOVER, text)
        if up_s is None and marker:
            up_s = now - began
        driver_seen = marker if tool == "ray" else RTK_DRIVER in text
        if driver_s is None and driver_seen:
            driver_s = now - began
        if first_step_s is None and FIRST_STEP.search(text):
            first_step_s = now - began
        if now >= next_query:
            next_query = now + STATE_POLL_S
            state = query_job(job_id)
            if state is not None and state.terminal:
                total_s = time.perf_counter() - began
                text = output.read_text(errors="replace") if output.exists() else ""
                if first_step_s is None and FIRST_STEP.search(text):
                    first_step_s = total_s
                timing = Timing(
                    tool, job_id, up_s, driver_s, first_step_s, total_s, state.describe()
                )
                return timing, text
        time.sleep(POLL_S)


def ray_pids(sandbox: Sandbox) -> dict[str, list[str]]:
    """Ray's daemons still running, by node."""
    found = {}
    for node in sandbox.nodes:
        done = sandbox.run_in(node.name, ["pgrep", "-f", RAY_PROCESSES], 30)
        pids = done.stdout.split()
        if pids:
            found[node.name] = pids
    return found


def wait_clean(sandbox: Sandbox, env: dict[str, str], limit_s: float = 60.0) -> list[str]:
    """Wait until every node is idle and runs no Ray; kill leftovers by PID after limit_s.

    Returns one note per node where Ray had to be killed.
    """
    deadline = time.perf_counter() + limit_s
    while True:
        states = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True, timeout=30
        ).stdout.split()
        left = ray_pids(sandbox)
        if not left and states and all(s == "idle" for s in states):
            return []
        if time.perf_counter() > deadline:
            break
        time.sleep(1.0)
    notes = []
    for node, pids in left.items():
        notes.append(f"{node}: Ray still running after the job ({len(pids)} process(es)); killed")
        sandbox.run_in(node, ["kill", "-9", *pids], 30)
    return notes


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def show(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def _between(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument(
        "--rtk-preflight",
        choices=("enforce", "record", "skip"),
        default="skip",
        help="rtk sbatch --preflight: the separate preflight step before training.",
    )
    parser.add_argument(
        "--compare-split",
        action="store_true",
        help="Also time rtk-2p: the train script as it was before rtk train --up.",
    )
    parser.add_argument("--job-limit-s", type=float, default=600.0)
    parser.add_argument("--keep", action="store_true", help="Keep the submit directory.")
    args = parser.parse_args()

    load_start = load_average()
    print(f"load average at start: {load_start} ({os.cpu_count()} CPUs)", flush=True)
    state = tempfile.mkdtemp(prefix="rtk-bench-")
    submit_dir = Path(tempfile.mkdtemp(prefix="rtk-slurm-bench-", dir=SHARED_ROOT))
    rows: list[tuple[int, Timing]] = []
    notes: list[str] = []
    failed = True
    print(f"== {NODES} nodes: creating sandbox {NAME} with SLURM", flush=True)
    sandbox = create(NODES, name=NAME, subnet=SUBNET, slurm=True)
    try:
        env = {**os.environ, "RTK_STATE_DIR": state, **sandbox.slurm_env()}
        os.environ.update(sandbox.slurm_env())  # for query_job's scontrol
        rtk_script = render_rtk(sandbox.inventory_path, submit_dir, env, args)
        scripts = {"rtk": rtk_script}
        if args.compare_split:
            scripts["rtk-2p"] = render_split(rtk_script)
        tools = [*scripts, "ray"]
        for run in range(1, args.repeats + 1):
            shift = (run - 1) % len(tools)
            order = tools[shift:] + tools[:shift]
            for tool in order:
                script = (
                    scripts[tool]
                    if tool in scripts
                    else render_ray(sandbox.inventory_path, submit_dir, run, args.max_steps)
                )
                timing, text = time_job(tool, script, submit_dir, env, args.job_limit_s)
                print(
                    f"   run {run} {tool}: job {timing.job_id} {timing.state}; "
                    f"up {show(timing.up_s)}, first step {show(timing.first_step_s)}, "
                    f"total {show(timing.total_s)}",
                    flush=True,
                )
                if not timing.state.startswith("COMPLETED") or timing.first_step_s is None:
                    print(text[-4000:], file=sys.stderr)
                    raise RuntimeError(f"{tool} job {timing.job_id}: {timing.state}, no step 1")
                cleanup = wait_clean(sandbox, env)
                notes += [f"run {run} {tool}: {n}" for n in cleanup]
                rows.append((run, timing))
        failed = False
    finally:
        sandbox.destroy()
        shutil.rmtree(state, ignore_errors=True)
        if failed or args.keep:
            print(f"job scripts and logs kept in {submit_dir}", file=sys.stderr)
        else:
            shutil.rmtree(submit_dir, ignore_errors=True)
    load_end = load_average()

    print()
    print("up: rtk's 'cluster ... is up' line; ray: the template's sleeps done")
    print(
        "driver: the training driver starts (rtk's line as it starts it, before up with "
        "--up; ray: at up)"
    )
    print(f"{'run':>3} {'tool':>6} {'job':>4} {'up':>8} {'driver':>8} {'step 1':>8} {'total':>8}")
    for run, t in rows:
        print(
            f"{run:>3} {t.tool:>6} {t.job_id:>4} {show(t.up_s):>8} {show(t.driver_s):>8} "
            f"{show(t.first_step_s):>8} {show(t.total_s):>8}"
        )
    print()
    split = any(t.tool == "rtk-2p" for _, t in rows)
    head = f"{'mean':>8} {'rtk':>8} {'ray':>8} {'rtk/ray':>8}"
    if split:
        head += f" {'rtk-2p':>8} {'2p/ray':>8} {'rtk/2p':>8}"
    print(head)
    spans = {
        "up": lambda t: t.up_s,
        "step 1": lambda t: t.first_step_s,
        "total": lambda t: t.total_s,
        "up->drv": lambda t: _between(t.up_s, t.driver_s),
        "drv->st1": lambda t: _between(t.driver_s, t.first_step_s),
        "up->st1": lambda t: _between(t.up_s, t.first_step_s),
    }
    for label, span in spans.items():
        rtk = mean([span(t) for _, t in rows if t.tool == "rtk"])
        ray = mean([span(t) for _, t in rows if t.tool == "ray"])
        line = f"{label:>8} {show(rtk):>8} {show(ray):>8} {ratio(rtk, ray):>8}"
        if split:
            two = mean([span(t) for _, t in rows if t.tool == "rtk-2p"])
            line += f" {show(two):>8} {ratio(two, ray):>8} {ratio(rtk, two):>8}"
        print(line)
    print()
    for note in notes:
        print(f"note: {note}")
    if not notes:
        print("every job left no Ray process behind (pgrep -f on each node)")
    print(f"load average: start {load_start}, end {load_end} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
