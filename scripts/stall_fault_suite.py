"""The stall suite: faults injected into a script of no rtk, on the 3-node sandbox, scored.

    python scripts/stall_fault_suite.py [--faults skip,swap] [--json OUT]

Needs root (the sandbox). It creates a 3-node sandbox (``sbfault``), brings Ray up on
it with ``rtk up``, and runs ``tests/data/user_scripts/faults.py`` under
``rtk torchrun --auto-steps --stall-timeout-s 20 --on-stall abort`` once per fault
(``FAULTS``): a rank stopped, asleep before a collective, one collective behind, calling
another collective or another size, killed, stuck in its data loader, a node whose link
drops every packet, and two healthy controls (uneven steps, a long checkpoint). Each
run is scored (``score``): the culprit rank and its node named first, with the cause,
and the collective with its sequence number where one is involved; nothing claimed for
the controls. It prints the table ``docs/stall.md`` keeps, and the seconds from the
stall's start (the last step any rank finished) to the diagnosis.

``tests/integration/test_torchrun_cluster.py`` runs some of them in CI through
``run_fault`` and ``score``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "data" / "user_scripts"
TIMEOUT_S = 20.0
FAULT_AT = 8
STEPS = 30
FAULT_LINE = re.compile(r"fault (\w+) rank (\d+) step (\d+) wall ([\d.]+)")


@dataclass(frozen=True)
class Fault:
    """One case of the suite and what rtk must name.

    Attributes:
        name: The script's ``--fault`` (``network``: the script runs clean and the
            culprit's node loses its link).
        culprit: The rank to be named first (None: a control, nothing to be named).
        cause: Words the culprit's reason (or the failure's line) must hold.
        collective: The op the stall must name with its sequence number (None: none).
        expected: What rtk should name, in words, for the table.
        fails: The run fails rather than hangs (torchrun sees the rank die): rtk names
            the first failed rank where it says which node's torchrun failed.
    """

    name: str
    culprit: int | None
    cause: str
    collective: str | None
    expected: str
    fails: bool = False


FAULTS = (
    Fault("stop", 1, "stopped (SIGSTOP", "all_reduce", "rank 1 stopped"),
    Fault("sleep", 1, "in main() at faults.py", "all_reduce", "rank 1 in its own code"),
    # One behind, the rank meets the others' last all_reduce with the script's final
    # barrier: that slot is where the hang shows.
    Fault(
        "skip",
        1,
        "barrier where the others call all_reduce",
        "all_reduce",
        "rank 1 one all_reduce behind: at the end, barrier against all_reduce",
    ),  # fmt: skip
    Fault("swap", 1, "broadcast", "all_reduce", "rank 1 calls broadcast"),
    # Gloo checks sizes: the rank with the smaller buffer aborts (NCCL would hang).
    Fault(
        "size",
        1,
        "Received data size doesn't match",
        None,
        "rank 1 aborted: its all_reduce of another size",
        fails=True,
    ),  # fmt: skip
    Fault("kill", 1, "killed by SIGKILL", None, "rank 1 killed (SIGKILL)", fails=True),
    Fault("loader", 1, "in next(dataloader)", "all_reduce", "rank 1 in its data loader"),
    Fault("network", 2, "did not answer", None, "node3 unreachable"),
    Fault("uneven", None, "", None, "no stall"),
    Fault("checkpoint", None, "", None, "no stall"),
)


@dataclass(frozen=True)
class Outcome:
    """One fault's run, scored.

    Attributes:
        fault: The fault's name.
        expected: What rtk should name.
        named: What rtk named: the stall's one line, or how the run ended.
        correct: Whether that is right (see ``score``).
        seconds: From the fault to the diagnosis (None: nothing to time).
        why: What was wrong, when it was not right.
    """

    fault: str
    expected: str
    named: str
    correct: bool
    seconds: float | None
    why: str = ""


@dataclass(frozen=True)
class FaultRun:
    """One fault's ``rtk torchrun``, done.

    Attributes:
        process: Its exit status and its output (stdout and stderr, merged).
        run_dir: Its run directory.
        lines: Each output line with the wall time it arrived here.
        fault_wall_s: When the fault came: the rank's own word, or the link's cut.
    """

    process: subprocess.CompletedProcess[str]
    run_dir: Path
    lines: tuple[tuple[float, str], ...] = ()
    fault_wall_s: float | None = None


def run_fault(
    fault: Fault,
    inventory: str,
    output_dir: Path,
    env: dict[str, str],
    cut_link: Callable[[], None] | None = None,
) -> FaultRun:
    """Run ``fault`` under ``rtk torchrun``.

    ``cut_link`` drops the culprit node's packets (``network``): called once every rank
    has passed step ``FAULT_AT``, seen in the run directory's markers (``output_dir``
    must be one the nodes share with this machine).
    """
    run_dir = output_dir / fault.name
    script_fault = "none" if fault.name == "network" else fault.name
    argv = [
        sys.executable, "-m", "toolkit", "torchrun", inventory,
        "--output-dir", str(output_dir), "--run-id", fault.name,
        "--auto-steps", "--stall-timeout-s", f"{TIMEOUT_S:g}", "--on-stall", "abort",
        "--", "faults.py", "--fault", script_fault, "--rank", "1",
        "--at", str(FAULT_AT), "--steps", str(STEPS if fault.name != "network" else 400),
    ]  # fmt: skip
    job = subprocess.Popen(
        argv, cwd=SCRIPTS, env={**os.environ, **env}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=_read_lines, args=(job, lines), daemon=True)
    reader.start()
    cut_wall_s = None
    try:
        if cut_link is not None:
            _wait_for_steps(run_dir, FAULT_AT, job, deadline_s=300)
            cut_wall_s = time.time()
            cut_link()
        job.wait(timeout=600)
        reader.join(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    output = "".join(line for _, line in lines)
    (output_dir / f"{fault.name}.out").write_text(output)  # beside its run dir
    announced = next((float(m.group(4)) for _, t in lines if (m := FAULT_LINE.search(t))), None)
    process = subprocess.CompletedProcess(argv, job.returncode, output, "")
    return FaultRun(process, run_dir, tuple(lines), cut_wall_s or announced)


def _read_lines(job: subprocess.Popen[str], lines: list[tuple[float, str]]) -> None:
    assert job.stdout is not None
    for line in job.stdout:
        lines.append((time.time(), line))


def _wait_for_steps(
    run_dir: Path, steps: int, job: subprocess.Popen[str], deadline_s: float
) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise RuntimeError(f"the run ended before step {steps}")
        ends = 0
        for path in (run_dir / "markers").glob("rank-*.jsonl"):
            with suppress(OSError):
                ends += path.read_text().count('"step_end"') >= steps
        if ends >= 3:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the run never reached step {steps}")


def rank_nodes(run_dir: Path) -> dict[int, str]:
    """Each rank's node, from its markers' first line."""
    nodes = {}
    for path in sorted((run_dir / "markers").glob("rank-*.jsonl")):
        try:
            first = json.loads(path.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            continue
        nodes[int(first["rank"])] = str(first["node"])
    return nodes


def score(fault: Fault, run: FaultRun) -> Outcome:
    """Whether the run named ``fault``'s culprit (see the module), and how soon."""
    done, run_dir = run.process, run.run_dir
    stall_file = run_dir / "stall.json"
    stalls = json.loads(stall_file.read_text()) if stall_file.exists() else []

    def outcome(named: str, why: str = "", seconds: float | None = None) -> Outcome:
        return Outcome(fault.name, fault.expected, named, not why, seconds, why)

    if fault.culprit is None:
        if stalls:
            return outcome(stalls[0]["summary"], "a stall was claimed for a healthy run")
        if done.returncode != 0:
            return outcome(f"exit {done.returncode}", "the healthy run failed")
        return outcome("no stall")
    node = rank_nodes(run_dir).get(fault.culprit)
    if fault.fails:
        return _score_failure(fault, run, node, outcome)
    if not stalls:
        text = " ".join(done.stdout.split())
        return outcome(_ending(text) or f"exit {done.returncode}", "no stall was diagnosed")
    stall = stalls[0]
    named = stall["summary"]
    seconds = None
    if run.fault_wall_s is not None:
        seconds = float(stall["detected_wall_s"]) + float(stall["collect_s"]) - run.fault_wall_s
    suspects = stall["suspects"]
    if not suspects:
        return outcome(named, "no suspect", seconds)
    first = suspects[0]
    if first["node"] != node:
        return outcome(named, f"first suspect on {first['node']}, not {node}", seconds)
    if first["rank"] not in (fault.culprit, None):
        return outcome(named, f"first suspect rank {first['rank']}", seconds)
    if fault.cause not in first["reason"] and fault.cause not in named:
        return outcome(named, f"cause {first['reason']!r}, not {fault.cause!r}", seconds)
    if fault.collective is not None:
        stuck = [c for c in stall.get("collectives", []) if fault.culprit in _culprits(c)]
        if not stuck:
            return outcome(named, "the collective was not named", seconds)
        if f"{stuck[0]['op']} #{stuck[0]['seq']}" not in named:
            return outcome(named, "the one line does not name the collective", seconds)
    return outcome(named, "", seconds)


def _score_failure(
    fault: Fault, run: FaultRun, node: str | None, outcome: Callable[..., Outcome]
) -> Outcome:
    """A run that fails: rtk's line for the failed node must name the rank and the cause."""
    said = [(t, line.strip()) for t, line in run.lines if "rtk torchrun: torchrun on " in line]
    failed = [(t, line) for t, line in said if "failed first: " in line]
    if not failed:
        ending = said[0][1] if said else f"exit {run.process.returncode}"
        return outcome(ending, "no rank was named as the first failure")
    when, line = failed[0]
    named = line.removeprefix("rtk torchrun: ")
    seconds = when - run.fault_wall_s if run.fault_wall_s is not None else None
    if f"torchrun on {node} " not in line:
        return outcome(named, f"not named on {node}", seconds)
    if f"rank {fault.culprit} " not in line.split("failed first")[0]:
        return outcome(named, f"not rank {fault.culprit}", seconds)
    if fault.cause not in line:
        return outcome(named, f"the cause is not {fault.cause!r}", seconds)
    return outcome(named, "", seconds)


def _culprits(collective: dict[str, object]) -> set[int]:
    found: set[int] = set()
    for key in ("missing", "mismatched"):
        value = collective.get(key)
        if isinstance(value, dict):
            found |= {int(rank) for rank in value}
    unanswered = collective.get("unanswered")
    if isinstance(unanswered, list):
        found |= {int(rank) for rank in unanswered}
    return found


def _ending(text: str) -> str:
    """The run's own words on how it ended, when no stall was diagnosed."""
    for pattern in (r"rtk torchrun: [^.]*(?:exited|failed)[^.]*", r"FAILED[^.]*"):
        found = re.search(pattern, text)
        if found:
            return found.group(0)[:200]
    return ""


def table(outcomes: list[Outcome]) -> str:
    """The suite's table, as ``docs/stall.md`` keeps it."""
    rows = ["| fault | expected | named | right | seconds |", "|---|---|---|---|---|"]
    for o in outcomes:
        seconds = f"{o.seconds:.0f}" if o.seconds is not None else "-"
        right = "yes" if o.correct else f"**no**: {o.why}"
        named = o.named.replace("|", "/")
        rows.append(f"| {o.fault} | {o.expected} | {named} | {right} | {seconds} |")
    return "\n".join(rows)


@contextmanager
def sandbox_cluster() -> Iterator[tuple[Sandbox, str, dict[str, str]]]:
    """A 3-node sandbox with Ray up on it; its teardown whatever happens."""
    sys.path.insert(0, str(REPO))
    from toolkit.sandbox import create, destroy

    destroy("sbfault")
    sandbox = create(3, name="sbfault", subnet="10.77.45")
    state = tempfile.mkdtemp(prefix="rtk-fault-state-")
    env = {"RTK_STATE_DIR": state}
    inventory = str(sandbox.inventory_path)
    rtk = [sys.executable, "-m", "toolkit"]
    try:
        up = subprocess.run([*rtk, "up", inventory], env={**os.environ, **env}, check=False)
        if up.returncode != 0:
            raise RuntimeError("rtk up failed on the suite's sandbox")
        yield sandbox, inventory, env
    finally:
        subprocess.run([*rtk, "down", inventory], env={**os.environ, **env}, check=False)
        destroy("sbfault")


def main() -> int:
    """Run the faults asked for; 0 when every one was scored right."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default=",".join(f.name for f in FAULTS))
    parser.add_argument("--json", type=Path, help="write every outcome there too")
    args = parser.parse_args()
    wanted = [f for f in FAULTS if f.name in args.faults.split(",")]
    if not wanted:
        parser.error(f"--faults: none of {', '.join(f.name for f in FAULTS)}")
    outcomes = []
    output_dir = Path(tempfile.mkdtemp(prefix="rtk-fault-runs-", dir="/var/tmp"))
    with sandbox_cluster() as (sandbox, inventory, env):
        victim = sandbox.nodes[2].name  # rank 2's, one rank per node

        def link(state: str) -> None:
            sandbox.run_in(victim, ["ip", "link", "set", "eth0", state])

        for fault in wanted:
            network = fault.name == "network"
            began = time.monotonic()
            run = run_fault(
                fault, inventory, output_dir, env, (lambda: link("down")) if network else None
            )
            if network:  # the node back, and its Ray started anew (Ray declared it dead)
                link("up")
                sandbox.run_in(victim, ["pkill", "-9", "-f", "ray"])
                rtk_up = [sys.executable, "-m", "toolkit", "up", inventory]
                subprocess.run(rtk_up, env={**os.environ, **env}, check=False)
            result = score(fault, run)
            outcomes.append(result)
            took_s = time.monotonic() - began
            verdict = "right" if result.correct else f"WRONG: {result.why}"
            print(f"{fault.name} ({took_s:.0f} s): {verdict}: {result.named}", flush=True)
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    print(f"run directories: {output_dir}")
    return 0 if all(o.correct for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
