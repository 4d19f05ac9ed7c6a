"""Users' own training on a 3-node sandbox, profiled per step: ``rtk torchrun`` with
plain and marked DDP scripts, and the framework callbacks under ``rtk telemetry record``.

The scripts in tests/data/user_scripts are written as users write them for torchrun
(gloo on CPU here). Each run's directory is in this machine's /tmp, which no sandbox
node shares (each node's /tmp is its own): the ranks' markers are gathered on the head
and the run comes back here, as on a cluster without a shared filesystem.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    RAY_TEST_CLOCKS,
    REPO,
    failure_text,
    interrupt_when,
    pids_mentioning,
    require,
    require_sandbox_host,
    rtk,
)
from fake_nvml import FakeGpu, FakeNvml

from toolkit.cluster.plan import build_plan
from toolkit.gpu.limits_over_ssh import restore_file
from toolkit.inventory import load_inventory
from toolkit.power.records import read_power
from toolkit.power.windows import GpuKey
from toolkit.rundir import RunDir, read_markers
from toolkit.rundir.markers import Marker
from toolkit.sandbox import Sandbox
from toolkit.sandbox.procs import nsenter_argv

sys.path.insert(0, str(REPO / "scripts"))

from stall_fault_suite import FAULTS, rank_nodes, run_fault, score  # noqa: E402

pytestmark = pytest.mark.ray

SCRIPTS = REPO / "tests" / "data" / "user_scripts"
TORCHRUN_PROCESS = "torch.distributed.run"
NODES = ("node1", "node2", "node3")


@pytest.fixture(scope="module")
def sandbox_torchrun() -> Iterator[Sandbox]:
    """A fresh 3-node sandbox ``sbtr`` for these tests alone."""
    from toolkit.sandbox import create, destroy

    require_sandbox_host()
    destroy("sbtr")
    sandbox = create(3, name="sbtr", subnet="10.77.26", ray_env=RAY_TEST_CLOCKS)
    try:
        yield sandbox
    finally:
        sandbox.destroy()


@pytest.fixture(scope="module")
def fake_gpus() -> Iterator[Path]:
    """Each node's one GPU, the NVML fake's (a state file per node, shared /var/tmp).

    The limits range over 600..700 W, so optimize profiles 5 of them; the fake draws
    900 W when allowed, so its energy follows the limit and 600 W is the best.
    """
    folder = Path(tempfile.mkdtemp(prefix="rtk-test-fake-nvml-", dir="/var/tmp"))
    for node in NODES:
        gpu = FakeGpu(uuid=f"GPU-{node}-0", draw_w=900.0, power_limit_min_mw=600_000)
        FakeNvml([gpu]).fake_save(folder / f"fake-nvml-{node}.json")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(
    sandbox_torchrun: Sandbox,
    tmp_path_factory: pytest.TempPathFactory,
    ray_available: None,
    fake_gpus: Path,
) -> Iterator[dict[str, Any]]:
    require(find_spec("torch") is not None, "torch is not installed (pip install '.[train]')")
    env = {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("torchrun-state"))}
    # Every Python rtk runs on the nodes sees the NVML fake: Ray's processes (the power
    # policy's tasks) and rtk's node scripts (rtk up's put-back) alike. The inventory's
    # python is a wrapper that sets the fake's variables (honoured under pytest only).
    text = sandbox_torchrun.inventory_path.read_text()
    python = yaml.safe_load(text)["defaults"]["python"]
    wrapper = fake_gpus / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export RTK_FAKE_NVML={REPO / 'tests' / 'fake_nvml.py'}:from_state_file\n"
        f"export FAKE_NVML_STATE={fake_gpus}/fake-nvml-{{host}}.json\n"
        "export PYTEST_CURRENT_TEST=sandbox\n"
        f'exec {python} "$@"\n'
    )
    wrapper.chmod(0o755)
    inventory_path = tmp_path_factory.mktemp("torchrun-inventory") / "inventory.yaml"
    inventory_path.write_text(text.replace(json.dumps(python), json.dumps(str(wrapper)), 1))
    inventory = str(inventory_path)
    up = rtk("up", inventory, env=env)
    assert up.returncode == 0, up.stderr
    try:
        yield {"env": env, "inventory": inventory, "sandbox": sandbox_torchrun, "gpus": fake_gpus}
    finally:
        rtk("down", inventory, env=env)


def torchrun(
    ctx: dict[str, Any], run_dir: Path, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``rtk torchrun INVENTORY ARGS`` from the scripts' folder, into ``run_dir``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit",
            "torchrun",
            ctx["inventory"],
            *("--output-dir", str(run_dir.parent), "--run-id", run_dir.name),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=SCRIPTS,
        env={**os.environ, **ctx["env"]},
        check=False,
    )


def nothing_left(ctx: dict[str, Any]) -> None:
    """No torchrun and no rank of it on any node (the sandbox's processes are seen here)."""
    # A rank may outlive its torchrun by a moment (it exits on the signal torchrun sent
    # it): both are waited for, with one deadline (CI run 44 saw a rank 0.5 s after).
    deadline = time.monotonic() + 30

    def left() -> list[int]:
        return pids_mentioning(TORCHRUN_PROCESS) + pids_mentioning("train_ddp")

    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pids_mentioning(TORCHRUN_PROCESS) == []
    assert pids_mentioning("train_ddp") == []


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report" / "summary.json").read_text())


def trace_of(run_dir: Path) -> list[dict[str, Any]]:
    data = json.loads(gzip.decompress((run_dir / "report" / "trace.json.gz").read_bytes()))
    events: list[dict[str, Any]] = data["traceEvents"] if isinstance(data, dict) else data
    return events


def test_a_plain_ddp_script_with_auto_steps_names_the_slowed_rank(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """train_ddp.py has no rtk in it: steps come from the optimizer, waits from backward."""
    run_dir = tmp_path / "auto"
    # Every 4th step is long (a 1.5 s pause, as a checkpoint would be): the watchdog,
    # its learned timeout floored at 1 s here, must not take it for a stall.
    done = torchrun(
        cluster, run_dir, "--auto-steps", "--stall-floor-s", "1", "--", "train_ddp.py",
        *("--steps", "12", "--slow-rank", "1", "--slow-s", "0.3"),
        *("--pause-every", "4", "--pause-s", "1.5"),
    )  # fmt: skip
    assert done.returncode == 0, failure_text(done)
    assert "rtk torchrun: torchrun started on 3 node(s), 3 rank(s)" in done.stdout
    assert "rtk torchrun: 3 node(s) exited 0 (node[1-3])" in done.stdout
    records = read_markers(run_dir)  # every rank's file came back from its node
    assert sorted({r.rank for r in records}) == [0, 1, 2]
    assert len({r.node for r in records}) == 3
    summary = summary_of(run_dir)
    assert summary["run"]["steps"] == 12 and summary["run"]["steps_from"] == "auto"
    per_step = summary["steps"]["per_step"]
    assert [s["step"] for s in per_step] == list(range(12))
    assert all(s["energy_j"] > 0 for s in per_step)
    stragglers = summary["stragglers"]
    assert stragglers["source"] == "backward" and stragglers["slowest_rank"] == 1
    for rank in stragglers["ranks"]:
        if rank["rank"] == 1:
            assert rank["last"] >= 10  # last into backward at (nearly) every step
        else:
            assert rank["wait_s"] >= 2.0  # about 0.3 s at each of 12 steps
            assert rank["wait_energy_j"] > 0
    text = " ".join(done.stdout.split())
    assert "steps: 12, from optimizer hooks (--auto-steps)" in text
    assert "last to arrive most often: rank 1 on" in text
    assert "stalled" not in text and not (run_dir / "stall.json").exists()
    nothing_left(cluster)


def test_a_stopped_rank_and_a_stuck_one_are_named_while_the_run_hangs(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """At step 10 rank 1 stops itself (SIGSTOP) and rank 2 spins in next_batch() before
    its all-reduce; rank 0 waits in it. The watchdog names both, with where they are."""
    run_dir = tmp_path / "hang"
    timeout_s = 8.0
    done = torchrun(
        cluster, run_dir, "--auto-steps", "--stall-timeout-s", f"{timeout_s:g}",
        "--on-stall", "abort", "--", "train_ddp.py", "--steps", "60",
        *("--stop-rank", "1", "--stop-at", "10", "--hang-rank", "2", "--hang-at", "10"),
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-3000:]
    assert "rtk telemetry: command exited 75" in out  # the driver's STALL_EXIT
    (stall,) = json.loads((run_dir / "stall.json").read_text())
    # Named after the timeout (never before it), past the last finished step, every
    # node asked. How soon after is no test's to say: a loaded machine is slower.
    assert stall["step"] == 9 and stall["stalled_s"] > stall["timeout_s"] == timeout_s
    assert stall["action"] == "abort" and stall["collect_s"] > 0
    assert sorted(n["node"] for n in stall["nodes"] if n["error"] is None) == [
        "node1",
        "node2",
        "node3",
    ]
    suspects = {s["rank"]: s for s in stall["suspects"]}
    assert set(suspects) == {1, 2}
    assert suspects[1]["reason"] == "stopped (SIGSTOP or a debugger)"
    stuck = suspects[2]
    assert stuck["frame"]["function"] == "next_batch"
    assert stuck["frame"]["file"].endswith("train_ddp.py")
    line = stuck["frame"]["line"]
    source = (SCRIPTS / "train_ddp.py").read_text().splitlines()
    # Inside the spinning loop: py-spy reads whichever of its lines runs at that moment
    # (its `while True:` too).
    loop = source.index("    while True:", source.index("def next_batch(x, y):"))
    assert loop < line <= loop + 4, source[line - 1]
    ranks = {r["rank"]: r for n in stall["nodes"] for r in n["ranks"]}
    waiting = ranks[0]
    assert waiting["state"] != "stopped" and waiting["stack_source"] in ("py-spy", "faulthandler")
    assert any("backward" in f["function"] for f in waiting["frames"])
    assert ranks[1]["state"] == "stopped"
    # The Flight Recorders: rank 0 waits in DDP's all_reduce of step 10, which rank 2
    # (in next_batch) never entered; rank 1, stopped, could not answer.
    (stuck,) = stall["collectives"]
    assert (stuck["op"], stuck["group"], stuck["waiting"]) == ("all_reduce", "0", [0])
    assert list(stuck["missing"]) == ["2"] and stuck["unanswered"] == [1]
    assert ranks[0]["collectives"]["entered"]["0"] == stuck["seq"]
    assert ranks[2]["collectives"]["entered"]["0"] < stuck["seq"]
    text = " ".join(out.split())
    assert f"rtk torchrun: stalled at step 9 for {stall['stalled_s']:.0f} s: " in text
    assert f"all_reduce #{stuck['seq']} (group 0, " in text
    assert "rank 1 (node" in text and "is stopped (SIGSTOP or a debugger)" in text
    assert f"in next_batch() at train_ddp.py:{line}" in text
    assert "--on-stall abort: stopping the job on every node" in text
    nothing_left(cluster)


def test_a_rank_one_collective_behind_is_named_at_the_collective(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """The stall suite's ``skip`` (scripts/stall_fault_suite.py, faults.py): rank 1 skips
    one all_reduce at step 8 and runs on one collective behind the others, at the same
    line, every all_reduce a step late; the run hangs only at its end, where rank 1's
    final barrier meets the others' last all_reduce in the same slot."""
    fault = next(f for f in FAULTS if f.name == "skip")
    run = run_fault(fault, cluster["inventory"], tmp_path, cluster["env"])
    outcome = score(fault, run)
    assert outcome.correct, f"{outcome}\n{failure_text(run.process)}"
    run_dir = run.run_dir
    (stall,) = json.loads((run_dir / "stall.json").read_text())
    (stuck,) = stall["collectives"]
    node = rank_nodes(run_dir)[1]
    assert stuck["mismatched"] == {"1": "barrier where the others call all_reduce"}
    assert (stuck["missing"], stuck["unanswered"], stuck["waiting"]) == ({}, [], [0, 1, 2])
    assert stall["suspects"][0]["rank"] == 1 and stall["suspects"][0]["node"] == node
    assert stall["summary"] == (
        f"stalled at step {stall['step']} for {stall['stalled_s']:.0f} s: all_reduce "
        f"#{stuck['seq']} (group 0, 8.5 KiB) does not match: rank 1 ({node}) calls barrier "
        "where the others call all_reduce"
    )
    nothing_left(cluster)


def test_the_script_with_markers_shows_its_phases_and_barriers(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """train_ddp_markers.py: train_ddp.py with step, phase and barrier calls added."""
    run_dir = tmp_path / "marked"
    done = torchrun(
        cluster, run_dir, "--", "train_ddp_markers.py",
        *("--steps", "12", "--slow-rank", "2", "--slow-s", "0.2"),
    )  # fmt: skip
    assert done.returncode == 0, failure_text(done)
    summary = summary_of(run_dir)
    assert summary["run"]["steps"] == 12 and summary["run"]["steps_from"] == "api"
    phases = {p["name"]: p for p in summary["marker_phases"]}
    assert set(phases) == {"data", "backward"}
    assert phases["data"]["count"] == 36 and phases["data"]["slowest_rank"] == 2
    assert [b["step"] for b in summary["barriers"]] == [3, 7, 11]
    assert all(b["ranks"] == 3 for b in summary["barriers"])
    assert summary["stragglers"]["source"] == "barriers+backward"
    assert summary["stragglers"]["slowest_rank"] == 2
    names = [e.get("name") for e in trace_of(run_dir) if e.get("ph") == "X"]
    assert names.count("data") == 36 and names.count("backward") == 36
    assert sum(1 for n in names if str(n).startswith("barrier ")) == 9  # 3 ranks x 3


def record(
    ctx: dict[str, Any], run_dir: Path, script: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``rtk telemetry record INVENTORY -- python SCRIPT ARGS`` from the scripts' folder."""
    return subprocess.run(
        [
            sys.executable, "-m", "toolkit", "telemetry", "record", ctx["inventory"],
            *("--output-dir", str(run_dir.parent), "--run-id", run_dir.name),
            "--", sys.executable, script, *args,
        ],
        capture_output=True, text=True, timeout=300, cwd=SCRIPTS,
        env={**os.environ, **ctx["env"]}, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("script", "steps_from", "ranks", "tokens"),
    [
        ("train_hf.py", "hf", 1, 8 * 4 * 32),  # 8 steps of 4 sequences of 32 tokens
        ("train_lightning.py", "lightning", 1, 8 * 4 * 32),
        ("train_ray.py", "ray_train", 2, 8 * 2 * 8 * 16),  # 2 workers, 8 rows of 16
    ],
)
def test_framework_callbacks_give_steps_and_tokens(
    cluster: dict[str, Any], tmp_path: Path, script: str, steps_from: str, ranks: int,
    tokens: int,
) -> None:  # fmt: skip
    run_dir = tmp_path / script.removesuffix(".py")
    done = record(cluster, run_dir, script, *(["--num-workers", "2"] if ranks > 1 else []))
    assert done.returncode == 0, failure_text(done)
    run = summary_of(run_dir)["run"]
    assert (run["steps"], run["steps_from"], run["ranks"]) == (8, steps_from, ranks)
    assert run["tokens"] == tokens and run["energy_per_token_j"] > 0
    if steps_from == "ray_train":
        check_ray_train_markers(read_markers(run_dir), ranks, rows=8, tokens_per_row=16)


def check_ray_train_markers(
    markers: list[Marker], ranks: int, rows: int, tokens_per_row: int
) -> None:
    """Each TorchTrainer worker (one per node) wrote its rank's steps, numbered from 0,
    each with its tokens and samples and loss, and its report() as a phase under its
    last step."""
    assert sorted({(m.rank, m.local_rank, m.world_size) for m in markers}) == [
        (rank, 0, ranks) for rank in range(ranks)
    ]
    assert len({m.node for m in markers}) == len({m.pid for m in markers}) == ranks
    for rank in range(ranks):
        mine = [m for m in markers if m.rank == rank]
        assert mine[0].event == "run_start" and mine[0].fields == {"steps_from": "ray_train"}
        steps = [(m.event, m.step) for m in mine if m.event.startswith("step_")]
        assert steps == [(e, n) for n in range(8) for e in ("step_begin", "step_end")]
        ends = [m.fields for m in mine if m.event == "step_end"]
        assert [(f["tokens"], f["samples"]) for f in ends] == [(rows * tokens_per_row, rows)] * 8
        assert all(isinstance(f["loss"], float) for f in ends)
        phases = [(m.event, m.fields["name"], m.step) for m in mine if m.event.startswith("phase")]
        assert phases == [("phase_begin", "report", 7), ("phase_end", "report", 7)]


def test_bad_input_is_one_line_and_nothing_starts(cluster: dict[str, Any], tmp_path: Path) -> None:
    # A script that is not there.
    done = torchrun(cluster, tmp_path / "missing", "--", "trian_ddp.py")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "rtk: trian_ddp.py: no such file in the working directory . (shipped to every "
        "node); give the script's path relative to --working-dir"
    ]
    # More ranks than a node's GPUs (the inventory says each node has one).
    data = yaml.safe_load(Path(cluster["inventory"]).read_text())
    for node in data["nodes"]:
        node["gpus"] = 1
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(yaml.safe_dump(data))
    done = torchrun(
        {**cluster, "inventory": str(gpus)},
        tmp_path / "ranks",
        "--nproc-per-node",
        "2",
        "--",
        "train_ddp.py",
    )
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "node1 has 1 GPU(s): --nproc-per-node 2 would put two ranks on one GPU" in line
    # A rendezvous port some other process listens on, on the head.
    sandbox: Sandbox = cluster["sandbox"]
    head = sandbox.nodes[0].name
    listen = (
        "import socket,time; s=socket.socket(); s.bind(('',29455)); s.listen(); time.sleep(120)"
    )
    holder = subprocess.Popen(
        nsenter_argv(sandbox.node(head).init_pid, [sys.executable, "-c", listen]),
        start_new_session=True,
    )
    try:
        time.sleep(1.0)
        done = torchrun(cluster, tmp_path / "port", "--rdzv-port", "29455", "--", "train_ddp.py")
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "the rendezvous port 29455 on the head node1 is in use by another process" in line
    for name in ("missing", "ranks", "port"):
        assert not (tmp_path / name).exists()  # refused before the run began
    nothing_left(cluster)


def test_env_and_ranks_reach_every_rank_and_ctrl_c_stops_them_all(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    run_dir = tmp_path / "stopped"
    run = subprocess.Popen(
        [
            sys.executable, "-m", "toolkit", "torchrun", cluster["inventory"],
            *("--output-dir", str(tmp_path), "--run-id", run_dir.name),
            *("--nproc-per-node", "2", "--env", "RTK_TEST_MARK=hello"),
            "--", "show_env.py", "--then-sleep", "600",
        ],
        cwd=SCRIPTS,
        env={**os.environ, **cluster["env"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert run.stdout is not None
    line = re.compile(r"rank (\d)/6 local (\d) node (\S+) mark (\S+) run_dir (\S+) gloo (\S+)")
    seen: list[tuple[str, ...]] = []
    output = []
    for text in run.stdout:
        output.append(text)
        found = line.search(text)
        if found:
            seen.append(found.groups())
        if len(seen) == 6:
            break
    else:
        pytest.fail("".join(output[-40:]))
    assert sorted(int(rank) for rank, *_ in seen) == list(range(6))
    assert sorted({node for _, _, node, *_ in seen}) == ["node1", "node2", "node3"]
    assert sorted(local for _, local, *_ in seen) == ["0", "0", "0", "1", "1", "1"]
    assert {(mark, run, gloo) for *_, mark, run, gloo in seen} == {
        ("hello", str(run_dir), "eth0")  # the user's --env, rtk's run dir, rtk's network
    }
    assert len(pids_mentioning(TORCHRUN_PROCESS)) == 3  # one torchrun per node
    run.send_signal(signal.SIGINT)
    rest, _ = run.communicate(timeout=120)
    assert run.returncode == 130, "".join(output[-20:]) + rest
    nothing_left(cluster)


# -- --power-policy, on the NVML fake's GPUs ------------------------------------------


def gpu_limits_w(ctx: dict[str, Any]) -> dict[str, float]:
    """Each node's fake GPU's power limit now."""
    limits = {}
    for node in NODES:
        state = json.loads((ctx["gpus"] / f"fake-nvml-{node}.json").read_text())
        limits[node] = state["gpus"][0]["power_limit_mw"] / 1000
    return limits


def restore_files(ctx: dict[str, Any]) -> list[str]:
    """The nodes that keep a GPU restore file (in their own Ray temp dir)."""
    path = restore_file(build_plan(load_inventory(ctx["inventory"])))
    sandbox: Sandbox = ctx["sandbox"]
    return [n for n in NODES if sandbox.run_in(n, ["test", "-e", path]).returncode == 0]


def test_optimize_keeps_the_best_limit_and_puts_every_limit_back(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    run_dir = tmp_path / "optimize"
    done = torchrun(
        cluster, run_dir, "--auto-steps", "--power-policy", "optimize", "--max-slowdown", "0.5", "--",
        "train_ddp.py", *("--epochs", "3", "--steps", "100", "--slow-rank", "1", "--slow-s", "0.05"),
    )  # fmt: skip
    assert done.returncode == 0, failure_text(done)
    text = " ".join(done.stdout.split())
    assert "power: optimize: 3 GPU(s) on 3 node(s)" in text
    log = read_power(RunDir(run_dir).power)
    assert log is not None and log.policy == "optimize" and len(log.gpus) == 3
    kept = [d for d in log.decisions if d.settled]
    assert kept and len(set(kept[0].limits_w.values())) == 1, text
    chosen_w = kept[0].limits_w[GpuKey("node1", 0)]
    assert chosen_w in (600.0, 625.0, 650.0, 675.0, 700.0), text
    assert f"chose {chosen_w:.0f} W" in text
    assert f"power policy optimize on 3 GPU(s): kept {chosen_w:.0f} W" in text  # the report
    # Which limit wins is the controller's (tests/unit/power); the sandbox's step times
    # swing by 5-50% from window to window on two shared cores, so here the measuring is
    # checked: each fake GPU draws its limit (under its 900 W), so a window's energy per
    # step is the 3 limits' sum times its time per step.
    for record in log.windows:
        window = record.window
        if window.energy_j:
            expected_j = sum(window.limits_w.values()) * window.step_s
            assert record.energy_per_step_j == pytest.approx(expected_j, rel=0.25), record
    assert "power: power limits put back on 3 node(s)" in text
    assert gpu_limits_w(cluster) == dict.fromkeys(NODES, 700.0)
    assert restore_files(cluster) == []


def _start_lowering(cluster: dict[str, Any], run_dir: Path, *options: str) -> subprocess.Popen[str]:
    """A long stragglers run (rank 1 slowed), returned once a GPU's limit is lowered."""
    run = subprocess.Popen(
        [
            sys.executable, "-m", "toolkit", "torchrun", cluster["inventory"],
            *("--output-dir", str(run_dir.parent), "--run-id", run_dir.name),
            "--auto-steps", "--power-policy", "stragglers", *options,
            "--", "train_ddp.py", *("--epochs", "1000", "--steps", "100", "--slow-rank", "1", "--slow-s", "0.1"),
        ],
        cwd=SCRIPTS,
        env={**os.environ, **cluster["env"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while min(gpu_limits_w(cluster).values()) == 700.0:
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()
            pytest.fail(f"no limit was lowered: {run.communicate()[0][-3000:]}")
        time.sleep(0.5)
    return run


def test_stragglers_lowers_the_gpus_that_wait_and_ctrl_c_puts_every_limit_back(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """One long stragglers run: the GPUs that wait for rank 1 are lowered, its own keeps
    its limit; Ctrl-C then puts every limit back before the job ends."""
    run_dir = tmp_path / "stragglers"
    run = _start_lowering(cluster, run_dir, "--max-slowdown", "0.9")
    assert restore_files(cluster) != []
    output = interrupt_when(
        run,
        lambda: all(gpu_limits_w(cluster)[n] < 700.0 for n in ("node1", "node3")),
        180,
        "the GPUs waiting for rank 1 lowered",
    )
    assert run.returncode == 130, output[-3000:]
    # Put back before the job's stop ended it (its last log lines may not reach here).
    assert gpu_limits_w(cluster) == dict.fromkeys(NODES, 700.0), output[-3000:]
    assert restore_files(cluster) == []
    nothing_left(cluster)
    # The run directory is in the head's private /tmp: Ctrl-C still brings it here.
    assert "result file(s) from the head into" in output, output[-3000:]
    log = read_power(RunDir(run_dir).power)
    assert log is not None and log.policy == "stragglers"
    last = {str(k): v for k, v in log.decisions[-1].limits_w.items()}
    assert last["node2/gpu0"] == 700.0  # rank 1's: the slowest keeps its full limit
    assert last["node1/gpu0"] < 700.0 and last["node3/gpu0"] < 700.0, log.decisions[-1]
    waited = [w.window.wait_s for w in log.windows if w.window.wait_s]
    least = [str(min(waits, key=lambda k: waits[k])) for waits in waited]
    assert least.count("node2/gpu0") >= 0.8 * len(least), least  # rank 1 waits least


def test_limits_a_killed_driver_left_are_put_back_by_the_next_rtk_up(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """The driver killed outright cannot put back: each node's restore file does, at rtk up."""
    run = _start_lowering(cluster, tmp_path / "killed")
    sandbox: Sandbox = cluster["sandbox"]
    sandbox.run_in("node1", ["pkill", "-9", "-f", "toolkit.torchrun.fanout"])
    run.communicate(timeout=120)
    lowered = [n for n, w in gpu_limits_w(cluster).items() if w < 700.0]
    assert lowered and set(lowered) <= set(restore_files(cluster))
    down = rtk("down", cluster["inventory"], env=cluster["env"])
    assert down.returncode == 0, down.stdout + down.stderr
    up = rtk("up", cluster["inventory"], env=cluster["env"])
    assert up.returncode == 0, up.stdout + up.stderr
    for node in lowered:
        assert f"{node}: put back GPU power limits an earlier run left" in up.stdout + up.stderr
    assert gpu_limits_w(cluster) == dict.fromkeys(NODES, 700.0)
    assert restore_files(cluster) == []
