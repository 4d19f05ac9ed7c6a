"""`rtk train` on the 3-node sandbox: Ray Train over SSH-started Ray, all three strategies.

The run directory is under /var/tmp, which every sandbox node shares with the host
(each node's /tmp is its own), as a real cluster shares an NFS home.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import failure_text, interrupt_when, require, rtk

from toolkit.inventory import load_inventory
from toolkit.rundir import RunDir, read_markers
from toolkit.rundir.traces import read_table, row_dicts
from toolkit.sandbox import Sandbox

pytestmark = pytest.mark.ray

TRAIN = [
    "--model-size",
    "tiny",
    "--num-workers",
    "3",
    "--max-steps",
    "30",
    "--barrier-every",
    "5",
    "--save-steps",
    "10",
]


@pytest.fixture(scope="module")
def trained(
    sandbox_train: Sandbox, tmp_path_factory: pytest.TempPathFactory, ray_available: None
) -> Iterator[dict[str, Any]]:
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    env = {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("train-state"))}
    output = Path(f"/var/tmp/rtk-test-runs-{uuid.uuid4().hex[:8]}")
    inventory = str(skewed_inventory(sandbox_train, tmp_path_factory.mktemp("inventory")))
    up = rtk("up", inventory, env=env)
    assert up.returncode == 0, up.stderr
    try:
        yield {"env": env, "output": output, "inventory": inventory}
    finally:
        rtk("down", inventory, env=env)
        shutil.rmtree(output, ignore_errors=True)


# The sandbox's nodes share one clock; one of them is made to run this far ahead in
# every rtk process (toolkit/wallclock.py), so each run shows the report correcting it.
SKEW_S = 3.0


def skewed_node(sandbox: Sandbox) -> str:
    return sandbox.nodes[1].name


def skewed_inventory(sandbox: Sandbox, where: Path) -> Path:
    """The sandbox's inventory with ``SKEW_S`` set in the second node's environment."""
    data = yaml.safe_load(sandbox.inventory_path.read_text())
    for node in data["nodes"]:
        if node.get("name", node.get("host")) == skewed_node(sandbox):
            node.setdefault("env", {})["RTK_CLOCK_SKEW_S"] = str(SKEW_S)
            break
    else:
        raise AssertionError(f"no node {skewed_node(sandbox)} in {sandbox.inventory_path}")
    path = where / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(ctx: dict[str, Any], run_id: str, *extra: str) -> Path:
    done = rtk(
        "train",
        ctx["inventory"],
        *TRAIN,
        "--output-dir",
        str(ctx["output"]),
        "--run-id",
        run_id,
        *extra,
        env=ctx["env"],
        timeout=600,
    )
    assert done.returncode == 0, failure_text(done)
    assert "SUCCEEDED after" in done.stderr
    # rtk turns Ray Train's preemption watcher off: no actor, no error line of its own.
    assert "PreemptionWatcher" not in done.stdout + done.stderr
    progress = re.findall(r"step (\d+)/\d+ loss", done.stdout)
    assert progress and len(progress) == len(set(progress)), "progress lines repeated"
    if "--timings" in extra:
        check_timings(done.stderr)
    return ctx["output"] / run_id


def check_timings(stderr: str) -> None:
    """rtk train --timings: every phase measured, one after another, within the total."""
    table = stderr[stderr.index("phase ") :].splitlines()[:7]
    labels = [line.split()[0] for line in table]
    assert labels == ["phase", "preflight", "job", "to", "training", "report", "total"], table
    spans = [[float(x) for x in line.split()[-3:]] for line in table[1:]]
    total_s = spans[-1][1]
    for (_, end_s, _), (start_s, _, took_s) in zip(spans[:-2], spans[1:-1], strict=True):
        assert end_s <= start_s + 0.05 and took_s >= 0, table  # in order, no overlap
    assert 0 < spans[-2][1] <= total_s, table


def rtk_background(ctx: dict[str, Any], *args: str) -> subprocess.Popen[str]:
    """Start ``rtk ARGS`` against the training cluster without waiting (output merged)."""
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **ctx["env"]},
    )


def metric_steps(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoints(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / "train").glob("checkpoint_*") if p.is_dir())


def check_run(run_dir: Path, sandbox: Sandbox, steps: int) -> None:
    metrics = metric_steps(run_dir)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert metrics[-1]["loss"] < 0.6 * metrics[0]["loss"]
    records = read_markers(run_dir)
    ranks = sorted({r.rank for r in records})
    assert ranks == [0, 1, 2]
    # One rank per node, every node used.
    nodes = {r.rank: r.node for r in records if r.event == "run_start"}
    assert sorted(nodes.values()) == sorted(n.name for n in sandbox.nodes)
    for rank in ranks:
        barriers = [r.step for r in records if r.rank == rank and r.event == "barrier"]
        assert barriers == [5, 10, 15, 20, 25, 30]
    assert 1 <= len(checkpoints(run_dir)) <= 3
    # Every rank ran its Flight Recorder and watched for a stall's ask (its file says so).
    flight = sorted(p.name for p in (run_dir / "flight").glob("rank-*.json"))
    assert flight == [f"rank-{rank:05d}.json" for rank in ranks], flight
    check_telemetry(run_dir, sandbox, steps)
    # rtk train ran the fast preflight first and kept it with the run.
    checked = json.loads((run_dir / "preflight.json").read_text())
    assert checked["status"] in ("pass", "warn")
    reached = {c["scope"] for c in checked["checks"] if c["name"] == "connect.node"}
    assert reached == {n.name for n in sandbox.nodes}


def samples(run_dir: Path, node: str) -> list[dict[str, Any]]:
    """A node's collected samples (a killed sampler's trace is read up to its last batch)."""
    table = read_table(RunDir(run_dir).node_traces(node))
    return [row for batch in table.to_batches() for row in row_dicts(batch)]


def check_telemetry(
    run_dir: Path, sandbox: Sandbox, steps: int, lost: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Traces from every node, a report consistent with them; returns the summary."""
    manifest = json.loads((run_dir / "telemetry" / "manifest.json").read_text())
    names = sorted(n.name for n in sandbox.nodes)
    assert sorted(manifest["nodes"]) == names
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    window = summary["window"]
    for name, node in manifest["nodes"].items():
        assert node["status"] == ("lost" if name in lost else "complete"), (name, node)
        rows = samples(run_dir, name)
        assert len(rows) == node["samples"] > 0
        # The sandbox's nodes share the host's clock, but one runs SKEW_S ahead in rtk's
        # stamps: the offsets must find exactly that.
        skew_s = SKEW_S if name == skewed_node(sandbox) else 0.0
        assert abs(node["clock"]["offset_s"] - skew_s) < 0.05, (name, node["clock"])
        if name in lost:
            continue
        # The report's energy for the node is what its own trace says: the sensor's
        # cumulative energy between the window's ends, on the node's clock.
        offset = node["clock"]["offset_s"]
        t = [r["wall_s"] - offset for r in rows]
        e = [r["energy_j"] for r in rows]
        start, end = window["start_wall_s"], window["end_wall_s"]
        assert t[0] <= start and t[-1] >= end
        expected = interp(end, t, e) - interp(start, t, e)
        assert summary["nodes"][name]["energy_j"] == pytest.approx(expected, rel=0.1, abs=0.5)
    # The step timeline: every step on rank 0, every barrier met by all three ranks.
    assert summary["run"]["steps"] == steps
    assert [s["step"] for s in summary["steps"]["per_step"]] == list(range(1, steps + 1))
    barriers = summary["barriers"]
    assert all(b["ranks"] == 3 and b["spread_s"] < 1.0 for b in barriers)
    check_trace(run_dir, sandbox, steps)
    for plot in ("power", "step_energy", "utilization"):
        png = run_dir / "report" / "plots" / f"{plot}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run_dir / "report" / "report.html").is_file()
    return summary


def check_trace(run_dir: Path, sandbox: Sandbox, steps: int) -> None:
    """The Perfetto export: every rank's steps, the skewed node's lined up with the rest."""
    with gzip.open(run_dir / "report" / "trace.json.gz", "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    nodes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(nodes.values()) == sorted(n.name for n in sandbox.nodes)
    steps_seen = {e["name"] for e in events if e.get("ph") == "X" and e["name"].startswith("step ")}
    assert len(steps_seen) == steps
    exits: dict[str, dict[str, float]] = {}
    for e in events:
        if e.get("ph") == "X" and e["name"].startswith("barrier "):
            exits.setdefault(e["name"], {})[nodes[e["pid"]]] = (e["ts"] + e["dur"]) / 1e6
    assert exits
    skewed = skewed_node(sandbox)
    for name, by_node in exits.items():
        # Every rank leaves a barrier at the same moment: once the skewed node's 3 s
        # are taken off, its wait ends with the others'; left in, 3 s late.
        assert skewed in by_node and len(by_node) == len(sandbox.nodes), (name, by_node)
        assert max(by_node.values()) - min(by_node.values()) < 0.5, (name, by_node)


def interp(x: float, xs: list[float], ys: list[float]) -> float:
    for (x0, y0), (x1, y1) in zip(
        zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False
    ):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y0
    raise AssertionError(f"{x} outside the trace")


def test_ddp_trains_marks_barriers_and_resumes(
    trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    run_dir = train(trained, "ddp", "--strategy", "ddp", "--timings")
    check_run(run_dir, sandbox_train, 30)
    assert len(checkpoints(run_dir)) == 3
    train(trained, "ddp", "--strategy", "ddp", "--resume", "--max-steps", "40")
    steps = [m["step"] for m in metric_steps(run_dir)]
    assert steps == list(range(1, 41))  # 31-40 once each: nothing repeated or skipped
    assert len(checkpoints(run_dir)) == 3  # 20, 30, 40 kept


@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_fsdp2_and_deepspeed_train_on_gloo_ranks(
    strategy: str, trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    if strategy == "deepspeed":
        require(
            find_spec("deepspeed") is not None,
            "deepspeed is not installed (pip install '.[deepspeed]')",
        )
    extra = ["--strategy", strategy] + (["--zero-stage", "2"] if strategy == "deepspeed" else [])
    # A power policy on nodes without GPUs: one line, and the run goes on as it would.
    extra += ["--power-policy", "optimize"] if strategy == "fsdp2" else []
    run_dir = train(trained, strategy, *extra)
    check_run(run_dir, sandbox_train, 30)
    if strategy == "fsdp2":
        (note,) = [json.loads(line) for line in (run_dir / "power.jsonl").read_text().splitlines()]
        assert note["kind"] == "note"
        assert note["text"].startswith("no GPU with an energy counter on any of 3 node(s)")


def test_launch_runs_any_command_with_the_working_dir_and_cluster_env(
    trained: dict[str, Any], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text(
        "import os, socket\n"
        "print('launched on', socket.gethostname(), 'ifname', os.environ['GLOO_SOCKET_IFNAME'])\n"
    )
    done = rtk(
        "launch",
        trained["inventory"],
        "--working-dir",
        str(work),
        "--",
        "python",
        "hello.py",
        env=trained["env"],
        timeout=300,
    )
    assert done.returncode == 0, failure_text(done)
    assert "launched on node1 ifname" in done.stdout
    assert "ifname lo" not in done.stdout
    failing = rtk(
        "launch",
        trained["inventory"],
        "--working-dir",
        str(work),
        "--",
        "python",
        "-c",
        "raise SystemExit(3)",
        env=trained["env"],
        timeout=300,
    )
    assert failing.returncode == 1
    assert "FAILED" in failing.stderr


def test_a_lost_worker_node_restarts_from_the_last_checkpoint(
    trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    """Kill every Ray process of one worker node mid-run; ``rtk up`` brings it back."""
    victim = sandbox_train.nodes[-1].name
    run_dir = trained["output"] / "failover"
    argv = [
        *("--max-steps", "80", "--save-steps", "20", "--gradient-accumulation-steps", "4"),
        *("--max-failures", "1", "--restart-wait-s", "120"),
    ]
    job = rtk_background(
        trained,
        *("train", trained["inventory"], *TRAIN, *argv),
        *("--output-dir", str(trained["output"]), "--run-id", "failover"),
    )
    sampler_victim = sandbox_train.nodes[1].name
    try:
        deadline = time.monotonic() + 300

        def reach(step: int) -> None:
            while len(metric_lines(run_dir)) < step:
                assert job.poll() is None, job.communicate()[0][-4000:]
                assert time.monotonic() < deadline, f"the run never reached step {step}"
                time.sleep(0.2)

        # First one node's telemetry sampler dies (SIGKILL); training goes on.
        reach(25)
        sampler_killed = sandbox_train.run_in(sampler_victim, ["pkill", "-9", "-f", "NodeSampler"])
        assert sampler_killed.returncode == 0, "no sampler process to kill"
        sampler_killed_at = time.time()
        reach(45)
        # Then a whole worker node's Ray; its training worker is one of the processes.
        assert sandbox_train.run_in(victim, ["pgrep", "-f", "RayTrainWorker"]).returncode == 0
        killed = sandbox_train.run_in(victim, ["pkill", "-9", "-f", "ray"])
        assert killed.returncode == 0, killed.stderr
        killed_at = len(metric_lines(run_dir))
        up = rtk("up", trained["inventory"], env=trained["env"], timeout=300)
        assert up.returncode == 0, failure_text(up)
        try:
            output, _ = job.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            job.kill()
            raise AssertionError(f"the run never ended: {job.communicate()[0][-6000:]}") from None
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, output[-4000:]
    assert "SUCCEEDED after" in output
    assert killed_at < 80, "the kill came after the run had finished"
    assert [m["step"] for m in metric_steps(run_dir)] == list(range(1, 81))
    starts = [r for r in read_markers(run_dir) if r.event == "run_start"]
    restarts = [r for r in starts if r.fields["resumed"]]
    # Every rank restarted once, from one checkpoint, on all three nodes again. Which
    # checkpoint: Ray Train's controller collects reports every 2 s, so a node lost
    # within 2 s of a checkpoint restarts from the one before.
    assert len(restarts) == 3
    restart_steps = {r.step for r in restarts}
    assert len(restart_steps) == 1
    assert restart_steps <= {20, 40, 60}
    assert restarts[0].step <= killed_at

    assert sorted({r.node for r in restarts}) == sorted(n.name for n in sandbox_train.nodes), [
        (r.rank, r.node, r.hostname, r.step, r.wall_s) for r in starts
    ]
    # Telemetry: the report builds; the node whose sampler was killed shows its data up
    # to the kill and a gap after it; the node whose Ray was killed lost its sampler too.
    summary = check_telemetry(run_dir, sandbox_train, 80, lost=(sampler_victim, victim))
    rows = samples(run_dir, sampler_victim)
    # Its last sample, on this machine's clock (the skewed node stamps SKEW_S ahead),
    # comes before the kill and not long before it: what it had flushed is kept (how
    # much a kill loses, at most a flush interval, is tests/unit/telemetry's to check).
    last_s = rows[-1]["wall_s"] - (SKEW_S if sampler_victim == skewed_node(sandbox_train) else 0)
    assert sampler_killed_at - 10.0 < last_s < sampler_killed_at + 0.5
    node = summary["nodes"][sampler_victim]
    assert node["partial"] and node["gaps"] and node["covered_fraction"] < 1.0
    assert "report: " in output
    superseded = run_dir / "metrics.superseded.jsonl"
    restarted_at = restarts[0].step
    if superseded.exists():
        assert all(
            json.loads(x)["step"] > restarted_at for x in superseded.read_text().splitlines()
        )


def metric_lines(run_dir: Path) -> list[str]:
    try:
        return (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []


def scrape(url: str, token: str | None = None) -> tuple[int, str] | None:
    """Status and body of a GET of ``url``; None while nothing listens there."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return None


def test_telemetry_record_samples_every_node_around_any_command(
    trained: dict[str, Any], sandbox_train: Sandbox, tmp_path: Path
) -> None:
    """``rtk telemetry record``: traces from all nodes, live /metrics, the command's status.

    /metrics answers only with the cluster token, and on each node's cluster address.
    The run directory is in the head's private /tmp (no node shares this machine's):
    rtk packs it there and unpacks it here.
    """
    port = "9464"
    cluster = load_inventory(trained["inventory"]).name
    token = (Path(trained["env"]["RTK_STATE_DIR"]) / cluster / "auth_token").read_text().strip()
    refused: dict[str, int] = {}
    output = tmp_path / "private-runs"  # exists on no node: each node's /tmp is its own
    job = rtk_background(
        trained,
        *("telemetry", "record", trained["inventory"], "--prometheus-port", port),
        *("--output-dir", str(output), "--run-id", "record"),
        *("--working-dir", str(tmp_path), "--", "python", "-c", "import time; time.sleep(6)"),
    )
    scraped: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 120
        while len(scraped) < 3 and time.monotonic() < deadline and job.poll() is None:
            for node in sandbox_train.nodes:
                if node.name in scraped:
                    continue
                url = f"http://{node.address}:{port}/metrics"
                answer = scrape(url, token)
                if answer is None:  # not listening yet
                    continue
                assert answer[0] == 200, (url, answer)
                scraped[node.name] = answer[1]
                refused[node.name] = (scrape(url) or (0, ""))[0]
            time.sleep(0.3)
        printed, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, printed[-4000:]
    assert "from the head into" in printed
    assert sorted(scraped) == sorted(n.name for n in sandbox_train.nodes)
    assert set(refused.values()) == {401}
    for name, body in scraped.items():
        assert f'rtk_cpu_util_pct{{node="{name}",device="host",kind="host"}}' in body
    run_dir = output / "record"
    manifest = json.loads((run_dir / "telemetry" / "manifest.json").read_text())
    assert {n["status"] for n in manifest["nodes"].values()} == {"complete"}
    assert sorted(manifest["nodes"]) == sorted(n.name for n in sandbox_train.nodes)
    for name in manifest["nodes"]:
        assert samples(run_dir, name)
    # The head really holds it in its own /tmp, which this machine cannot see directly.
    head = sandbox_train.nodes[0].name
    listing = sandbox_train.run_in(head, ["ls", str(run_dir / "telemetry")])
    assert listing.returncode == 0 and "manifest.json" in listing.stdout
    assert json.loads((run_dir / "command.json").read_text())["exit_code"] == 0
    assert (run_dir / "report" / "report.html").is_file()
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["window"]["basis"] != "markers"  # no trainer: the samples' span
    assert summary["window"]["duration_s"] > 5

    def record(*command: str) -> subprocess.CompletedProcess[str]:
        return rtk(
            *("telemetry", "record", trained["inventory"], "--output-dir", str(trained["output"])),
            *("--working-dir", str(tmp_path), "--", *command),
            env=trained["env"],
            timeout=300,
        )

    # A command's exit status is the job's: here one that could not start (the shell's
    # 127); a command that exits 4 takes the same way from the job's driver back.
    missing = record("no-such-program-rtk")
    assert missing.returncode == 1
    assert "cannot run 'no-such-program-rtk'" in missing.stdout
    assert "exited 127" in missing.stdout


def train_apart(
    trained: dict[str, Any], run_dir: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``rtk train ARGS`` into ``run_dir``, a path in this machine's /tmp: each sandbox
    node's /tmp is its own, so no node shares it with another or with this one."""
    done = rtk(
        "train",
        trained["inventory"],
        *args,
        *("--save-steps", "0", "--output-dir", str(run_dir.parent), "--run-id", run_dir.name),
        env=trained["env"],
        timeout=600,
    )
    assert done.returncode == 0, failure_text(done)
    return done, run_dir


def test_training_without_a_shared_filesystem_gathers_every_ranks_markers(
    trained: dict[str, Any], sandbox_train: Sandbox, tmp_path: Path
) -> None:
    """Each rank writes markers on its own node; the head gathers them, rtk brings them here."""
    done, run_dir = train_apart(
        trained,
        tmp_path / "apart",
        *("--num-workers", "3", "--max-steps", "10", "--barrier-every", "5"),
        *("--straggle", "2:1.0"),  # rank 2 sleeps 1 s before every barrier
    )
    records = read_markers(run_dir)
    assert sorted({r.rank for r in records}) == [0, 1, 2]
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["run"]["steps"] == 10
    assert [b["ranks"] for b in summary["barriers"]] == [3, 3]
    # The injected straggler is named, and the others' waiting is measured in energy.
    stragglers = summary["stragglers"]
    assert stragglers["slowest_rank"] == 2 and stragglers["barriers"] == 2
    node_of = {r.rank: r.node for r in records}
    assert stragglers["last_by_node"] == {node_of[2]: 2}
    for rank in stragglers["ranks"]:
        if rank["rank"] == 2:
            assert rank["wait_s"] < 0.5 and rank["last"] == 2
        else:
            assert rank["wait_s"] >= 1.6  # about 1 s at each of the two barriers
            assert rank["wait_energy_j"] is not None and rank["wait_energy_j"] > 0
    assert stragglers["wait_energy_j"] > 0
    assert "last to arrive most often: rank 2" in " ".join(done.stdout.split())
    # Written on the head before the run, it came back with the results.
    assert json.loads((run_dir / "preflight.json").read_text())["cluster"] == sandbox_train.name


def test_training_without_telemetry_or_a_shared_filesystem_keeps_rank_0s_steps(
    trained: dict[str, Any], sandbox_train: Sandbox, tmp_path: Path
) -> None:
    """--no-telemetry starts no sampler, yet rank 0's metrics.jsonl comes back from its worker.

    The one rank asks for a sliver of a worker's ``rtk_host:NODE`` resource, which rtk
    gives that node alone: Ray can place rank 0 nowhere else, so its metrics.jsonl is
    written in that worker's private /tmp, and only the driver's gathering of the ranks'
    files brings it to the head, whence rtk fetches the run.
    """
    worker = sandbox_train.nodes[2].name
    resources = json.dumps({"CPU": 1, f"rtk_host:{worker}": 0.01})
    _, run_dir = train_apart(
        trained,
        tmp_path / "no-telemetry",
        *("--no-telemetry", "--num-workers", "1", "--resources-per-worker", resources),
        *("--max-steps", "12", "--barrier-every", "4"),
    )
    assert [m["step"] for m in metric_steps(run_dir)] == list(range(1, 13))
    records = read_markers(run_dir)
    assert {(r.rank, r.node) for r in records} == {(0, worker)}
    assert not (run_dir / "telemetry").exists()  # no sampler ran
    # The worker wrote it; the head holds the copy rtk fetched (neither is this /tmp).
    for node in (worker, sandbox_train.nodes[0].name):
        listing = sandbox_train.run_in(node, ["cat", str(run_dir / "metrics.jsonl")])
        assert listing.returncode == 0 and len(listing.stdout.splitlines()) == 12, node


def test_ctrl_c_stops_the_job_on_the_cluster(
    trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    job = rtk_background(
        trained,
        *("train", trained["inventory"], *TRAIN, "--max-steps", "100000", "--no-telemetry"),
        *("--output-dir", str(trained["output"]), "--run-id", "interrupted"),
    )
    output = interrupt_when(
        job, lambda: len(metric_lines(trained["output"] / "interrupted")) >= 5, 240, "step 5"
    )
    assert job.returncode == 130, output[-3000:]
    assert "rtk: stopping job" in output
    # The job's workers are gone from every node.
    deadline = time.monotonic() + 60
    while any(
        sandbox_train.run_in(n.name, ["pgrep", "-f", "RayTrainWorker"]).returncode == 0
        for n in sandbox_train.nodes
    ):
        assert time.monotonic() < deadline, "training workers still run after Ctrl-C"
        time.sleep(1)


# The guide's train_gpt.py line ("--model_size 350M ... --save_steps 500"), scaled to
# the CPU sandbox: tiny instead of 350M, a CPU instead of a GPU per worker, 20 steps
# with a checkpoint every 10 instead of 2000 and 500. Nothing else changes.
SEED_LINE = [
    *("--model_size", "tiny", "--batch_size", "2", "--gradient_accumulation_steps", "4"),
    *("--precision", "bf16", "--max_steps", "20", "--num_workers", "0"),
    *("--resources_per_worker", '{"CPU": 1}', "--ray_address", "auto", "--save_steps", "10"),
]


def test_the_seed_guides_command_line_runs_as_rtk_train(
    trained: dict[str, Any], sandbox_train: Sandbox
) -> None:
    """``python train_gpt.py FLAGS`` becomes ``rtk train FLAGS``; RTK_INVENTORY names the cluster."""
    env = {**trained["env"], "RTK_INVENTORY": trained["inventory"]}
    done = rtk("train", *SEED_LINE, env=env, timeout=600)
    out = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, out
    finished = re.search(r"SUCCEEDED after [\d.]+ s; run dir (\S+)", done.stderr)
    assert finished, out
    # The default --output-dir (~/rtk-runs), this cluster's name and the time.
    run_dir = Path(os.path.expanduser(finished.group(1)))
    try:
        assert run_dir.parent == Path.home() / "rtk-runs"
        assert run_dir.name.startswith(f"{sandbox_train.name}-")
        metrics = metric_steps(run_dir)
        assert [m["step"] for m in metrics] == list(range(1, 21))
        workers = len(sandbox_train.nodes)  # --num_workers 0: one per node on CPU nodes
        assert {m["tokens"] for m in metrics} == {2 * 4 * 64 * workers}
        assert metrics[-1]["loss"] < metrics[0]["loss"]
        record = json.loads((run_dir / "train_config.json").read_text())
        assert (record["precision"], record["gradient_accumulation_steps"]) == ("bf16", 4)
        assert record["layout"]["num_workers"] == workers
        assert record["layout"]["resources_per_worker"] == {"CPU": 1.0}
        assert len(checkpoints(run_dir)) == 2  # steps 10 and 20
        assert sorted({r.rank for r in read_markers(run_dir)}) == list(range(workers))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            run_dir.parent.rmdir()  # when this run made it and nothing else is there


def test_a_node_cut_off_mid_run_is_named_and_the_run_resumes_without_it(
    trained: dict[str, Any], sandbox_train: Sandbox, tmp_path: Path
) -> None:
    """node3's link goes down mid-run: the watchdog names it as not answering, and with
    --on-stall restart-excluding and min_nodes 2 the run resumes from its checkpoint on
    the two other nodes and finishes. Last in this module: the cluster is brought back
    to three nodes after, but nothing later needs it."""
    victim = sandbox_train.nodes[-1].name
    data = yaml.safe_load(Path(trained["inventory"]).read_text())
    data["min_nodes"] = 2
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    run_dir = trained["output"] / "excluded"
    job = rtk_background(
        trained,
        *("train", str(inventory), *TRAIN, "--max-steps", "75", "--save-steps", "25"),
        *("--stall-timeout-s", "10", "--on-stall", "restart-excluding"),
        *("--output-dir", str(trained["output"]), "--run-id", "excluded"),
    )
    try:
        deadline = time.monotonic() + 300
        # The cut comes once Ray Train has registered a checkpoint (its snapshot file),
        # which it does up to 2 s after the step, and at a step between two checkpoints
        # (25 and 50): a node lost during one gives the watchdog ten times its timeout.
        registered = run_dir / "train" / "checkpoint_manager_snapshot.json"
        while (
            sum(1 for m in _markers(run_dir) if m.event == "step_end") < 3 * 35
            or not registered.exists()
        ):
            assert job.poll() is None, job.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the run never reached step 35"
            time.sleep(0.5)
        cut = sandbox_train.run_in(victim, ["ip", "link", "set", "eth0", "down"])
        assert cut.returncode == 0, cut.stderr
        try:
            output, _ = job.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            job.kill()
            raise AssertionError(f"the run never ended: {job.communicate()[0][-6000:]}") from None
    finally:
        if job.poll() is None:
            job.kill()
        sandbox_train.run_in(victim, ["ip", "link", "set", "eth0", "up"])
        # Ray declared the node dead; its raylet may still run there, cut off from a GCS
        # that no longer knows it: the node's Ray goes, and rtk up starts it anew.
        sandbox_train.run_in(victim, ["pkill", "-9", "-f", "ray"])
        rtk("up", trained["inventory"], env=trained["env"], timeout=300)
    assert job.returncode == 0, output[-4000:]
    assert "SUCCEEDED after" in output and "finished at step 75" in output
    assert (run_dir / "stall.json").exists(), output[-6000:]
    (stall,) = json.loads((run_dir / "stall.json").read_text())
    assert stall["action"] == "restart-excluding" and stall["excluded"] == [victim]
    assert stall["stalled_s"] > stall["timeout_s"] == 10  # declared past its timeout, not before
    assert [(s["node"], s["rank"]) for s in stall["suspects"]] == [(victim, None)]
    assert stall["suspects"][0]["reason"].startswith("did not answer")
    text = " ".join(output.split())
    assert f"{victim} did not answer" in text
    assert f"--on-stall restart-excluding: {victim}: did not answer" in text
    assert "resumed at step" in text
    # Ray Train restarted two workers from a checkpoint, on the other nodes.
    restarts = [m for m in _markers(run_dir) if m.event == "run_start" and m.fields["resumed"]]
    assert len(restarts) == 2 and victim not in {m.node for m in restarts}
    assert {m.world_size for m in restarts} == {2}
    assert all(m.step % 25 == 0 for m in restarts)
    assert [m["step"] for m in metric_steps(run_dir)][-1] == 75


def _markers(run_dir: Path) -> list[Any]:
    try:
        return read_markers(run_dir)
    except (OSError, ValueError):
        return []
