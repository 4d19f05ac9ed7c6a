"""scripts/gpu-acceptance.sh: its CPU mode as CI runs it, and its pure helpers.

The GPU stages themselves run only on a GPU machine (bash scripts/gpu-acceptance.sh);
here: the whole script without a GPU (every stage listed, skipped with its reason, the
JSON and markdown written), bad usage, the parsers of nvidia-smi's outputs, pytest's
report, /proc, the wheelhouse plan, the markdown, the no-Ray training path with
its telemetry and report on this machine's CPU, and what the Ray stages would run and
how they read rtk's outputs (built here by rtk's own records).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeGpu, FakeNvml

from toolkit.train.config import STRATEGIES as TRAIN_STRATEGIES
from toolkit.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

from gpu_acceptance import install, procs, smi  # noqa: E402
from gpu_acceptance.context import STRATEGIES, GpuInfo, StageContext  # noqa: E402
from gpu_acceptance.kernels import kernel_rows, top_kernels  # noqa: E402
from gpu_acceptance.markdown import header, render  # noqa: E402
from gpu_acceptance.nvmlcost import sensor_cost  # noqa: E402
from gpu_acceptance.record import RunRecord, StageResult  # noqa: E402
from gpu_acceptance.runner import ray_skip_reason  # noqa: E402
from gpu_acceptance.samples import achieved  # noqa: E402
from gpu_acceptance.stages import (  # noqa: E402
    STAGE_NAMES,  # noqa: E402
    by_name,
    with_cluster,
)
from gpu_acceptance.stages.energy import curve_energy, ratios  # noqa: E402
from gpu_acceptance.stages.flight_nccl import reading  # noqa: E402
from gpu_acceptance.stages.power import plan  # noqa: E402
from gpu_acceptance.stages.preflight import compare, dcgmi_count  # noqa: E402
from gpu_acceptance.stages.pytest_gpu import gpu_test_files, parse_junit  # noqa: E402
from gpu_acceptance.stages.with_ray import figures as ray_figures  # noqa: E402
from gpu_acceptance.stages.with_ray import profile as ray_profile  # noqa: E402
from gpu_acceptance.training import local_run, metrics_figures  # noqa: E402

SCRIPT = REPO / "scripts" / "gpu-acceptance.sh"
RAY_STAGES = [
    "ray-up",
    "ray-preflight",
    "ray-train",
    "ray-mfu",
    "ray-torchrun",
    "ray-record",
    "ray-profile",
    "ray-power",
    "ray-down",
]
EXPECTED_STAGES = [
    "pytest-gpu",
    "sensor",
    "energy",
    "train",
    "power-clocks",
    "preflight",
    "vllm",
    "flight-nccl",
    *RAY_STAGES[:-1],
    "zeus-power",  # Zeus's optimizer beside ray-power's, without Ray
    "ray-down",
]
# The stages that list the command lines they would run: every Ray stage, and Zeus's.
COMMAND_STAGES = [*RAY_STAGES, "zeus-power"]
# What each Ray stage runs, as the CPU mode and --dry-run list it (full run).
TRAIN_FLAGS = (
    "--precision bf16 --strategy {s} --learning-rate 0.0006 --warmup-steps 4 --max-steps 12 "
    "--num-workers 1 --output-dir $WORK/ray-runs --run-id {n} --telemetry --power-rate-hz 50 "
    "--log-every 5 --no-preflight --barrier-every 10"
)
RAY_COMMANDS = {
    "ray-up": [
        "python -m toolkit up --local --json",
        "python -m toolkit status --local --json",
        "bash -c 'eval \"$(python -m toolkit env --local --export --shell bash)\" && ray status'",
    ],
    "ray-preflight": ["python -m toolkit preflight --local --load --load-seconds 4 --json"],
    "ray-record": [
        "python -m toolkit telemetry record --local --working-dir $WORK/record-job "
        "--output-dir $WORK/ray-runs --run-id plain-torch --power-rate-hz 50 -- "
        "python plain_torch.py --seconds 20",
        "python -m toolkit report $WORK/ray-runs/plain-torch --json",
    ],
    "ray-profile": [
        "python -m toolkit profile $WORK/profile/experiment.yaml --keep-cluster",
        "python -m toolkit profile $WORK/profile/experiment.yaml --restore",
    ],
    "ray-down": [
        "python -m toolkit down --local --json",
        "pgrep -a raylet",
        "pgrep -a gcs_server",
    ],
}
TOP_KEYS = {
    "schema": int,
    "date": str,
    "mode": str,
    "host": str,
    "gpu_model": (str, type(None)),
    "gpu_count": int,
    "driver_version": (str, type(None)),
    "cuda_version": (str, type(None)),
    "torch_version": (str, type(None)),
    "python_version": str,
    "command": list,
    "environment": dict,
    "stages": list,
    "summary": dict,
    "duration_s": (int, float),
}
STAGE_KEYS = {
    "name": str,
    "title": str,
    "status": str,
    "reason": str,
    "duration_s": (int, float),
    "measurements": dict,
    "errors": list,
}


def acceptance(*args: str, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(SCRIPT), "--python", sys.executable, *args]
    if out is not None:
        argv += ["--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


def no_gpu_args() -> tuple[list[str], str]:
    """The CPU mode as on a machine without GPUs; on a GPU machine, its dry run."""
    if shutil.which("nvidia-smi"):
        return ["--dry-run"], "dry run"
    return [], "no GPU"


# -- the script, as CI runs it --------------------------------------------------------


def test_cpu_mode_lists_every_stage_skipped_and_writes_the_same_shape(tmp_path: Path) -> None:
    args, why = no_gpu_args()
    began = time.monotonic()
    done = acceptance(*args, out=tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 20
    printed = [line for line in done.stdout.splitlines() if re.match(r"\d+ ", line)]
    assert [line.split()[1] for line in printed] == EXPECTED_STAGES
    assert all(f"skipped: {why}" in line for line in printed), printed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "gpu-acceptance.json",
        "gpu-acceptance.log",
        "gpu-acceptance.md",
    ]

    record = json.loads((tmp_path / "out" / "gpu-acceptance.json").read_text())
    assert set(record) == set(TOP_KEYS)
    for key, kind in TOP_KEYS.items():
        assert isinstance(record[key], kind), (key, record[key])
    assert record["mode"] == ("dry-run" if args else "cpu")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["date"])
    assert record["command"][0] == "bash scripts/gpu-acceptance.sh"
    assert [s["name"] for s in record["stages"]] == EXPECTED_STAGES
    for stage in record["stages"]:
        assert set(stage) == set(STAGE_KEYS)
        for key, kind in STAGE_KEYS.items():
            assert isinstance(stage[key], kind), (stage["name"], key)
        assert stage["status"] == "skipped"
        assert stage["reason"].startswith(why) and stage["title"]
    assert record["summary"] == {"ok": 0, "failed": 0, "skipped": len(EXPECTED_STAGES)}
    assert isinstance(record["environment"]["importable"]["torch"], bool)

    markdown = (tmp_path / "out" / "gpu-acceptance.md").read_text()
    first = markdown.splitlines()[0]
    assert first == f"## {record['date'][:10]}: GPU acceptance, " + (
        "dry run" if args else "CPU mode (no GPU)"
    )
    assert "| # | stage | status | time | result |" in markdown
    for i, name in enumerate(EXPECTED_STAGES, 1):
        assert f"| {i} | {name} | skipped |" in markdown

    # The Ray stages list the command lines they would run, in the JSON and the markdown.
    stages = {s["name"]: s for s in record["stages"]}
    for name in COMMAND_STAGES:
        commands = stages[name]["measurements"]["commands"]
        assert commands and all(isinstance(c, str) for c in commands), name
        section = markdown.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        assert section.startswith("\n```sh\n" + "\n".join(commands) + "\n```"), name
    for name, expected in RAY_COMMANDS.items():
        assert stages[name]["measurements"]["commands"] == expected, name
    train = stages["ray-train"]["measurements"]["commands"]
    assert train[:2] == [
        "python -m toolkit train --local --model-size 125M " + TRAIN_FLAGS.format(s="ddp", n="ddp"),
        "python -m toolkit report $WORK/ray-runs/ddp --json",
    ]
    assert train[2].startswith(
        'python -m gpu_acceptance.trainer \'{"run_dir": "$WORK/runs/ddp-loop"'
    )
    assert train[-2].endswith(
        "--run-id zero3-offload "
        + TRAIN_FLAGS.split("--run-id {n} ")[1]
        + " --zero-stage 3 --offload-optimizer"
    )
    assert len(train) == 2 * 5 + 1  # train and report per strategy, the loop after ddp
    mfu = stages["ray-mfu"]["measurements"]["commands"]
    assert mfu[0].startswith("python -m toolkit train --local --model-size 350M ")
    assert mfu[0].endswith(
        "--max-steps 20 --num-workers 1 --output-dir $WORK/ray-runs "
        "--run-id ddp-350m-compiled --telemetry --power-rate-hz 50 --log-every 5 "
        "--no-preflight --barrier-every 10 --compile on"
    )
    assert '"model_size": "350M"' in mfu[1] and '"compile": "on"' in mfu[1]
    assert mfu[1].endswith("--kernels 10")
    for name in set(EXPECTED_STAGES) - set(COMMAND_STAGES):
        assert "commands" not in stages[name]["measurements"]


def test_out_defaults_to_the_out_variable(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path / "from-env")}
    done = subprocess.run(
        ["bash", str(SCRIPT), "--python", sys.executable, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "from-env" / "gpu-acceptance.json").exists()
    assert not (tmp_path / "gpu-acceptance-out").exists()


def test_dry_run_says_what_each_selected_stage_would_do(tmp_path: Path) -> None:
    done = acceptance("--dry-run", "--stages", "train,sensor", "--quick", out=tmp_path)
    assert done.returncode == 0, done.stderr
    stages = {
        s["name"]: s for s in json.loads((tmp_path / "gpu-acceptance.json").read_text())["stages"]
    }
    assert stages["sensor"]["reason"].startswith("dry run: would sample NVML at 10hz")
    assert "for 5 s idle" in stages["sensor"]["reason"]  # --quick windows
    assert "for 12 steps" in stages["train"]["reason"]
    assert "zero3-offload" in stages["train"]["reason"]
    for name in set(EXPECTED_STAGES) - {"train", "sensor"}:
        assert stages[name]["reason"] == "not selected (--stages)"


def test_a_ray_stage_brings_ray_up_and_ray_down_with_it(tmp_path: Path) -> None:
    done = acceptance("--dry-run", "--stages", "ray-train", "--quick", out=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    chosen = [s["name"] for s in record["stages"] if s["reason"].startswith("dry run")]
    assert chosen == ["ray-up", "ray-train", "ray-down"]
    assert record["environment"]["selected_stages"] == chosen
    stages = {s["name"]: s for s in record["stages"]}
    assert "for 12 steps with rtk train --local" in stages["ray-train"]["reason"]
    # --quick: a shorter GEMM; not selected stages still list their commands.
    assert stages["ray-preflight"]["measurements"]["commands"] == [
        "python -m toolkit preflight --local --load --load-seconds 2 --json"
    ]


@pytest.mark.parametrize(
    "args",
    [["--stages", "sensor,nope"], ["--bogus"], ["--train-steps", "0"], ["--budget-s", "-1"]],
)
def test_bad_usage_exits_2_and_writes_nothing(tmp_path: Path, args: list[str]) -> None:
    done = acceptance(*args, out=tmp_path / "out")
    assert done.returncode == 2
    assert "usage:" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_python_is_bad_usage(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--python", str(tmp_path / "no-python"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "no Python" in done.stderr


# -- nvidia-smi's outputs -------------------------------------------------------------

HELP_QUERY_GPU = """List of valid properties to query for the switch "--query-gpu=":

"timestamp"
The timestamp of the query, as "YYYY/MM/DD HH:MM:SS.msec".

"pci.bus_id" or "gpu_bus_id"
PCI bus id as "domain:bus:device.function", in hex.

"power.draw"
The last measured power draw of the whole board, in watts.

"power.draw.instant"
The last instantaneous power draw, in watts.

"total_energy_consumption"
Energy used since the driver was loaded.
"""

LOOP_CSV = """timestamp, index, uuid, power.draw.instant [W], total_energy_consumption [mJ]
2026/11/23 10:00:01.250, 0, GPU-aaaa, 612.50, 1000000
2026/11/23 10:00:01.350, 0, GPU-aaaa, [N/A], 1061000
2026/11/23 10:00:01.350, 1, GPU-bbbb, 98.00, 5000
timestamp, index, uuid, power.draw.instant [W], total_energy_consumption [mJ]
2026/11/23 10:00:01.450, 0, GPU-aaaa, 610.00, [Not Supported]
2026/11/23 10:00:01.55
"""

Q_POWER_CLOCK = """
==============NVSMI LOG==============

Timestamp                                 : Mon Nov 23 10:00:00 2026
Driver Version                            : 580.65.06
CUDA Version                              : 13.0

Attached GPUs                             : 1
GPU 00000000:18:00.0
    GPU Power Readings
        Average Power Draw                : 71.20 W
        Instantaneous Power Draw          : 70.85 W
        Current Power Limit               : 420.00 W
        Requested Power Limit             : 420.00 W
        Default Power Limit               : 700.00 W
        Min Power Limit                   : 200.00 W
        Max Power Limit                   : 700.00 W
    GPU Memory Power Readings
        Average Power Draw                : N/A
        Instantaneous Power Draw          : N/A
    Module Power Readings
        Average Power Draw                : N/A
        Current Power Limit               : N/A
    Clocks
        Graphics                          : 345 MHz
        SM                                : 345 MHz
        Memory                            : 2619 MHz
        Video                             : 765 MHz
    Applications Clocks
        Graphics                          : 1755 MHz
        Memory                            : 2619 MHz
    Max Clocks
        Graphics                          : 1980 MHz
        SM                                : 1980 MHz
        Memory                            : 2619 MHz
    Clock Policy
        Auto Boost                        : N/A
"""

Q_OLDER = """Attached GPUs                       : 1
GPU 00000000:3B:00.0
    Power Readings
        Power Management                : Supported
        Power Draw                      : 55.12 W
        Power Limit                     : 300.00 W
        Default Power Limit             : 300.00 W
    Clocks
        SM                              : 1410 MHz
"""


def test_query_fields_come_from_the_help_with_their_aliases() -> None:
    fields = smi.query_fields(HELP_QUERY_GPU)
    assert fields == {
        "timestamp",
        "pci.bus_id",
        "gpu_bus_id",
        "power.draw",
        "power.draw.instant",
        "total_energy_consumption",
    }
    assert smi.pick(fields, smi.POWER_FIELDS) == "power.draw.instant"
    assert smi.pick({"power.draw"}, smi.POWER_FIELDS) == "power.draw"
    assert smi.pick(fields - {"total_energy_consumption"}, smi.ENERGY_FIELDS) is None


def test_polled_csv_reads_units_missing_values_and_repeated_headers() -> None:
    rows, units = smi.parse_csv(LOOP_CSV)
    assert units == {"power.draw.instant": "W", "total_energy_consumption": "mJ"}
    assert [(r["index"], r["power.draw.instant"]) for r in rows] == [
        (0.0, 612.5),
        (0.0, None),
        (1.0, 98.0),
        (0.0, 610.0),
    ]  # the line cut short by the kill is dropped
    assert rows[3]["total_energy_consumption"] is None
    assert rows[0]["uuid"] == "GPU-aaaa"
    assert smi.in_si(rows[1]["total_energy_consumption"], "mJ") == pytest.approx(1061.0)
    assert smi.in_si(612.5, "W") == 612.5 and smi.in_si(None, "W") is None
    first, second = (smi.parse_timestamp(r["timestamp"]) for r in rows[:2])
    assert first is not None and second is not None
    assert second - first == pytest.approx(0.1)
    local = time.mktime((2026, 11, 23, 10, 0, 1, 0, 0, -1))
    assert first == pytest.approx(local + 0.25)
    assert smi.parse_timestamp("yesterday") is None


def test_q_output_gives_power_limits_and_clocks_per_gpu() -> None:
    tree = smi.parse_q(Q_POWER_CLOCK)
    assert tree["Driver Version"] == "580.65.06"
    gpu = tree["gpus"]["00000000:18:00.0"]
    # Sections of the same name keep apart: the module's limit is not the GPU's.
    assert gpu["Module Power Readings"]["Current Power Limit"] == "N/A"
    assert smi.power_and_clocks(tree) == {
        "00000000:18:00.0": {
            "power_limit_w": 420.0,
            "default_power_limit_w": 700.0,
            "min_power_limit_w": 200.0,
            "max_power_limit_w": 700.0,
            "power_draw_w": 70.85,
            "sm_clock_mhz": 345.0,
            "mem_clock_mhz": 2619.0,
            "max_sm_clock_mhz": 1980.0,
        }
    }
    older = smi.power_and_clocks(smi.parse_q(Q_OLDER))["00000000:3B:00.0"]
    assert older["power_limit_w"] == 300.0 and older["power_draw_w"] == 55.12
    assert older["sm_clock_mhz"] == 1410.0 and older["min_power_limit_w"] is None


def test_dcgmi_discovery_count() -> None:
    assert dcgmi_count("1 GPU found.\n+--------+\n| GPU ID |") == 1
    assert dcgmi_count("8 GPUs found.\n") == 8
    assert dcgmi_count("Error: unable to connect to host engine") is None


# -- preflight's facts against nvidia-smi ---------------------------------------------


def test_facts_against_nvidia_smi_flag_only_fields_that_must_agree() -> None:
    facts = {
        "count": 1,
        "driver_version": "580.65.06",
        "devices": {
            "GPU-aaaa": {
                "name": "NVIDIA H100 80GB HBM3",
                "persistence_mode": True,
                "pcie_gen": 5,
                "pcie_gen_max": 5,
                "clocks_event_reasons": 1,
            }
        },
    }
    rows, _ = smi.parse_csv(
        "index, uuid, driver_version, name, persistence_mode, pcie.link.gen.max,"
        " pcie.link.gen.current, clocks_event_reasons.active\n"
        "0, GPU-aaaa, 580.65.06, NVIDIA H100 80GB HBM3, Disabled, 5, 1, 0x0000000000000000\n"
    )
    fields = {
        "name": "name",
        "persistence_mode": "persistence_mode",
        "pcie_gen_max": "pcie.link.gen.max",
        "pcie_gen": "pcie.link.gen.current",
        "clocks_event_reasons": "clocks_event_reasons.active",
    }
    result = compare(facts, rows, fields)
    assert result["count"] == {"rtk": 1, "nvidia_smi": 1, "match": True}
    assert result["driver_version"]["match"] is True
    gpu = result["gpus"]["GPU-aaaa"]
    assert gpu["name"]["match"] and gpu["pcie_gen_max"]["match"]
    assert gpu["pcie_gen"] == {"rtk": 5, "nvidia_smi": 1, "match": False}  # idle link: shown
    assert gpu["clocks_event_reasons"] == {"rtk": 1, "nvidia_smi": 0, "match": False}
    assert result["mismatches"] == ["GPU-aaaa persistence_mode: rtk True, nvidia-smi False"]
    missing = compare({**facts, "count": 2}, [], fields)
    assert missing["mismatches"] == [
        "GPU count: rtk 2, nvidia-smi 0",
        "driver: rtk 580.65.06, nvidia-smi None",
        "GPU-aaaa: not listed by nvidia-smi",
    ]


# -- pytest's report, /proc, the sampler's lines --------------------------------------

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="tests.unit.gpu.test_control" name="test_power_limit_on_a_real_gpu" time="1.2"/>
<testcase classname="tests.unit.telemetry.test_sensors" name="test_nvml_on_a_real_gpu" time="0.3">
  <failure message="assert 0 &gt; 0">long traceback</failure></testcase>
<testcase classname="tests.unit.gpu.test_control" name="test_other" time="0">
  <skipped type="pytest.skip" message="needs root">skip</skipped></testcase>
<testcase classname="" name="tests.unit.profile.test_vllm_bench" time="0">
  <error message="collection failure">ModuleNotFoundError: No module named 'pydantic'</error></testcase>
</testsuite></testsuites>
"""


def test_junit_report_counts_and_messages() -> None:
    counts, cases = parse_junit(JUNIT)
    assert counts == {"passed": 1, "failed": 1, "error": 1, "skipped": 1, "tests": 4}
    assert cases[1] == {
        "test": "tests.unit.telemetry.test_sensors.test_nvml_on_a_real_gpu",
        "outcome": "failed",
        "message": "assert 0 > 0",
    }
    assert cases[2]["message"] == "needs root"
    assert cases[3]["test"] == "tests.unit.profile.test_vllm_bench"


def test_gpu_test_files_are_those_with_a_gpu_marked_test() -> None:
    files = gpu_test_files(REPO)
    assert "tests/unit/node/test_gpu_control.py" in files
    assert "tests/unit/telemetry/test_sensors.py" in files
    assert "tests/unit/scripts/test_gpu_acceptance.py" not in files  # a mention is no mark
    for name in files:
        assert re.search(r"^@pytest\.mark\.gpu$", (REPO / name).read_text(), re.M), name


def test_proc_stat_counts_fields_after_the_last_parenthesis() -> None:
    line = "4242 (python (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 129 0 0 20 0 3 0 99 0 0"
    assert procs.parse_proc_stat(line) == (731, 129)
    assert procs.cpu_seconds(os.getpid()) > 0


def test_run_kills_the_whole_group_at_its_limit(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild-alive"
    script = f"sleep 30 & sleep 0.5; touch {marker}; wait"
    done = procs.run(["bash", "-c", script], 0.2)
    assert done.timed_out and not done.ok
    time.sleep(0.8)
    assert not marker.exists()  # bash was killed with its sleep, before the touch


STAGE_LIKE = """
import signal, sys, time
from gpu_acceptance import procs, stage
signal.signal(signal.SIGTERM, stage._on_term)
child = procs.Background(["sleep", "60"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_stage_stopped_at_its_limit_takes_its_own_process_groups_down() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "scripts"), str(REPO)])}
    stage = subprocess.Popen(
        [sys.executable, "-c", STAGE_LIKE],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert stage.stdout is not None
    grandchild = int(stage.stdout.readline())
    os.kill(grandchild, 0)  # running, in a process group of its own
    assert os.getpgid(grandchild) != stage.pid
    procs.kill_group(stage)  # what the runner does at a stage's time limit
    assert stage.returncode == 128 + 15
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(grandchild, 0)
            time.sleep(0.05)


def test_achieved_rates_and_intervals_from_sampler_lines() -> None:
    rows: list[dict[str, Any]] = []
    for i in range(51):  # 5 s: power at 10 Hz, full readings at 2 Hz
        t = 1000.0 + i * 0.1
        kind = "gpu" if i % 5 == 0 else "gpu_power"
        rows.append({"wall_s": t, "kind": kind, "device": "GPU-a", "power_w": 300.0})
    rows.append({"wall_s": 1000.0, "kind": "host", "device": "host", "power_w": 90.0})
    figures = achieved(rows)
    assert figures["gpus"] == 1
    assert figures["power_readings_per_s"] == pytest.approx(10.0)
    assert figures["full_readings_per_s"] == pytest.approx(2.0)
    gpu = figures["per_gpu"]["GPU-a"]
    assert gpu["interval_median_ms"] == pytest.approx(100.0)
    assert gpu["interval_max_ms"] == pytest.approx(100.0)


# -- energy ---------------------------------------------------------------------------


def test_energy_over_the_window_from_counter_and_power() -> None:
    t = [100.0 + 0.1 * i for i in range(201)]  # 20 s at 10 Hz, 250 W throughout
    counter = [50_000.0 + 250.0 * (x - 100.0) for x in t]
    power = [250.0] * len(t)
    by_counter = curve_energy(t, counter, "counter", 10.0, 105.0, 115.0)
    by_power = curve_energy(t, power, "power", 10.0, 105.0, 115.0)
    assert by_counter["energy_j"] == pytest.approx(2500.0)
    assert by_power["energy_j"] == pytest.approx(2500.0)
    assert by_power["mean_power_w"] == pytest.approx(250.0)
    assert by_power["covered_s"] == pytest.approx(10.0)
    figures = {
        "rtk_counter": by_counter,
        "smi": {"energy_j": 2450.0},
        "zeus": {"energy_j": None},
    }
    assert ratios(figures, "rtk_counter") == {"smi": pytest.approx(0.98), "zeus": None}
    assert curve_energy([1.0], [5.0], "power", 10.0, 0.0, 2.0)["energy_j"] is None


def test_sensor_cost_counts_the_nvml_calls_of_one_reading() -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b", pci_bus_id="00000000:19:00.0")])
    cost = sensor_cost(fake, 10)
    assert cost["gpus"] == 2
    # Against the fake's own call counts: every call went through the counter.
    total = sum(fake.fake_calls.values())
    counted = cost["first_read_with_pcie"]["nvml_calls"] + sum(
        cost[k]["nvml_calls_per_read_per_gpu"] * 10 * 2 for k in ("read", "read_power")
    )
    assert counted <= total
    power = cost["read_power"]["functions"]
    assert power == {
        "nvmlDeviceGetFieldValues": {
            "calls_per_read_per_gpu": 1.0,
            "us_per_call": power["nvmlDeviceGetFieldValues"]["us_per_call"],
        }
    }
    functions = cost["read"]["functions"]
    assert functions["nvmlDeviceGetTotalEnergyConsumption"]["calls_per_read_per_gpu"] == 1.0
    assert "nvmlDeviceGetPcieThroughput" not in functions  # only in the first read
    assert "nvmlDeviceGetPcieThroughput" in cost["first_read_with_pcie"]["functions"]
    assert cost["read"]["us_per_read_per_gpu"] > 0


# -- power limits ---------------------------------------------------------------------


def test_plan_picks_a_limit_every_gpu_accepts_and_a_clock_step() -> None:
    before = {
        "GPU-a": {"power_limit_w": 700.0, "power_limit_min_w": 200.0, "max_sm_clock_mhz": 1980},
        "GPU-b": {"power_limit_w": 500.0, "power_limit_min_w": 350.0, "max_sm_clock_mhz": 1755},
    }
    assert plan(before) == {"power_limit_w": 350.0, "gpu_clocks_mhz": (1050, 1050)}
    one = {"GPU-a": {"power_limit_w": 700.0, "power_limit_min_w": 200.0, "max_sm_clock_mhz": None}}
    assert plan(one) == {"power_limit_w": 420.0, "gpu_clocks_mhz": None}


# -- the wheelhouse -------------------------------------------------------------------


def test_wheelhouse_plan_keeps_the_machines_torch_and_what_is_installed() -> None:
    names = [
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "numpy-2.3.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "nvidia_nccl_cu13-2.27.7-py3-none-manylinux_2_18_x86_64.whl",
        "nvidia_ml_py-13.615.71-py3-none-any.whl",
        "py_cpuinfo-9.0.0-py3-none-any.whl",
        "hjson-3.1.0-py3-none-any.whl",
        "deepspeed-0.19.8.tar.gz",
        "setuptools-84.2.1-py3-none-any.whl",
        "Jinja2-3.1.6-py3-none-any.whl",
        "README.txt",
    ]
    result = install.plan_wheelhouse([Path("/wh") / n for n in names], ["jinja2", "PyYAML"])
    assert [p.name for p in result.build_tools] == ["setuptools-84.2.1-py3-none-any.whl"]
    assert [p.name for p in result.wheels] == [
        "hjson-3.1.0-py3-none-any.whl",
        "nvidia_ml_py-13.615.71-py3-none-any.whl",
        "py_cpuinfo-9.0.0-py3-none-any.whl",
    ]
    assert [p.name for p in result.sdists] == ["deepspeed-0.19.8.tar.gz"]
    assert result.skipped == {
        "Jinja2-3.1.6-py3-none-any.whl": "already installed",
        "numpy-2.3.0-cp312-cp312-manylinux_2_28_x86_64.whl": "protected: the machine's own copy is kept",
        "nvidia_nccl_cu13-2.27.7-py3-none-manylinux_2_18_x86_64.whl": "protected: the machine's own copy is kept",
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl": "protected: the machine's own copy is kept",
    }
    assert install.constraints({"torch": "2.11.0+cu130", "numpy": "2.3.0", "click": "8.2"}) == (
        "numpy==2.3.0\ntorch==2.11.0+cu130\n"
    )
    assert install.distribution_of("zeus-0.16.0-py3-none-any.whl") == "zeus"
    assert install.distribution_of("not-a-package.tar.gz") is None


# -- the record and its markdown ------------------------------------------------------


def gpu_record() -> RunRecord:
    stages = [
        StageResult(name, f"title of {name}", reason="not selected (--stages)")
        for name in STAGE_NAMES
    ]
    stages[0] = StageResult(
        "pytest-gpu",
        "t",
        "failed",
        "1 passed, 1 failed",
        12.4,
        {"counts": {"passed": 1}},
        ["x failed: boom"],
    )
    stages[1] = StageResult(
        "sensor",
        "t",
        "ok",
        "read() 60 us/GPU",
        41.0,
        {
            "idle": {"10hz": {"cpu_pct_of_core": 0.41234, "per_gpu": {"GPU-a": {"ok": True}}}},
            "findings": ["slow 50hz"],
        },
    )
    stages[6] = StageResult("vllm", "t", "skipped", "vllm not installed")
    stages[3] = StageResult("train", "t", "skipped", "not selected (--stages)")
    return RunRecord(
        date="2026-11-23T10:00:00Z",
        mode="gpu",
        host="gpu1",
        gpu_model="NVIDIA H100 80GB HBM3",
        gpu_count=1,
        driver_version="580.65.06",
        cuda_version="13.0",
        torch_version="2.11.0+cu130 (CUDA 13.0)",
        python_version="3.12.3",
        command=["bash scripts/gpu-acceptance.sh"],
        environment={},
        stages=stages,
        duration_s=300.0,
    )


def test_markdown_summary_names_the_gpu_findings_and_figures() -> None:
    record = gpu_record()
    text = render(record)
    lines = text.splitlines()
    assert (
        lines[0]
        == "## 2026-11-23: GPU acceptance on NVIDIA H100 80GB HBM3 (driver 580.65.06, CUDA 13.0)"
    )
    assert "| 1 | pytest-gpu | failed | 12 s | 1 passed, 1 failed |" in lines
    assert "- pytest-gpu failed: 1 passed, 1 failed" in lines
    assert "- pytest-gpu: x failed: boom" in lines
    assert "- sensor: slow 50hz" in lines
    assert "- vllm skipped: vllm not installed" in lines
    assert "- idle.10hz.cpu_pct_of_core: 0.4123" in lines
    assert "- idle.10hz.per_gpu.GPU-a.ok: true" in lines
    assert not any("train skipped" in line for line in lines)  # not asked for: no finding
    record.gpu_count = 8
    assert header(record).startswith("## 2026-11-23: GPU acceptance on 8 x NVIDIA H100")


def test_stage_result_round_trips_through_json() -> None:
    result = gpu_record().stages[1]
    again = StageResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    assert StageResult.from_json({"name": "x", "status": "weird"}).status == "failed"


def test_context_round_trips_and_puts_rtk_on_the_path(tmp_path: Path) -> None:
    ctx = StageContext(
        repo=str(REPO),
        work=str(tmp_path),
        python=sys.executable,
        strategies=("ddp", "zero3"),
        importable={"ray": False, "torch": True},
        gpus=(GpuInfo(0, "GPU-a", "H100"),),
    )
    path = tmp_path / "context.json"
    ctx.dump(path)
    assert StageContext.load(path) == ctx
    assert not ctx.ray and ctx.has("torch") and not ctx.has("vllm")
    assert ctx.env()["PYTHONPATH"].split(os.pathsep)[:2] == [str(REPO / "scripts"), str(REPO)]
    # Stage 4 trains with every strategy rtk offers, each with options rtk accepts.
    configs = [TrainConfig(run_dir="r", **options).check() for options in STRATEGIES.values()]
    assert {config.strategy for config in configs} == set(TRAIN_STRATEGIES)


# -- training without Ray, with telemetry and the report ------------------------------


def test_metrics_figures_leave_out_the_warm_up(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 1, "loss": 5.0, "tokens": 512, "tokens_per_s": 10.0, "step_time_s": 9.0}]
    lines += [
        {
            "step": s,
            "loss": 4.0 - s / 10,
            "tokens": 512,
            "tokens_per_s": 1000.0 + s,
            "step_time_s": 0.5,
            "mfu": 0.3,
        }
        for s in range(2, 9)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 9, "cut')
    figures = metrics_figures(path, skip=3)
    assert figures["steps"] == 8
    assert figures["median_tokens_per_s"] == pytest.approx(1006.0)  # steps 4..8
    assert figures["median_mfu"] == pytest.approx(0.3)
    assert figures["first_loss"] == 5.0 and figures["last_loss"] == pytest.approx(3.2)
    assert metrics_figures(tmp_path / "none.jsonl")["steps"] == 0


def test_training_without_ray_samples_beside_and_builds_the_report(tmp_path: Path) -> None:
    ctx = StageContext(repo=str(REPO), work=str(tmp_path), python=sys.executable)
    figures = local_run(
        ctx, "cpu", {"strategy": "ddp", "model_size": "tiny", "precision": "fp32"}, 12, 120
    )
    assert "error" not in figures, figures.get("error")
    assert figures["backend"] == "gloo"  # NCCL on a GPU
    assert figures["metrics"]["steps"] == 12
    assert figures["sampler"]["samples"] > 0
    report = figures["report"]
    assert report["steps"] == 12
    assert report["tokens_per_s"] > 0 and report["energy_per_token_j"] > 0
    assert {"summary.json", "report.html"} <= set(report["report_files"])
    run_dir = tmp_path / "runs" / "cpu"
    # What ray-train reads from rtk report --json (summary.json's content), here on a CPU.
    read = ray_figures.report_figures(json.loads((run_dir / "report" / "summary.json").read_text()))
    assert read["tokens_per_s"] == pytest.approx(report["tokens_per_s"])
    assert read["steps"] == 12 and read["gpus"] == {}
    manifest = json.loads((run_dir / "telemetry" / "manifest.json").read_text())
    (node,) = manifest["nodes"].values()
    assert node["status"] == "complete" and node["sampler"]["samples"] > 0


# -- the Ray stages: what they read from rtk's outputs ----------------------------------

RAY_STATUS = """======== Autoscaler status: 2026-11-27 10:00:00.000000 ========
Node status
---------------------------------------------------------------
Active:
 1 node_7b3c0e2f
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Total Usage:
 0.0/16.0 CPU
 0.0/1.0 GPU
 0B/80.00GiB memory
 0B/37.25GiB object_store_memory

Total Demands:
 (no resource demands)
"""


def test_rtk_status_json_gives_the_gpus_ray_registered() -> None:
    from toolkit.cluster.ray_status import ClusterStatus, NodeStatus

    node = NodeStatus("localhost", "head", "127.0.0.1", alive=True, node_ip="127.0.0.1")
    node.resources = {"CPU": 16.0, "GPU": 1.0, "memory": 8.6e10, "rtk-host-localhost": 1.0}
    status = ClusterStatus("local", "http://127.0.0.1:8365", [node], ray_version="2.60.0")
    found = ray_figures.status_gpus(json.loads(json.dumps(status.to_json())))  # as printed
    assert found == {
        "nodes": 1,
        "alive": ["localhost"],
        "gpus": 1.0,
        "gpus_per_node": {"localhost": 1.0},
        "problems": [],
        "ray_version": "2.60.0",
        "error": None,
    }
    down = ClusterStatus("local", "x", [NodeStatus("localhost", "head", "127.0.0.1")])
    down.error = "not running: no rtk environment on the head (localhost); rtk up first"
    found = ray_figures.status_gpus(down.to_json())
    assert found["alive"] == [] and found["gpus"] == 0 and found["error"] == down.error
    assert ray_figures.ray_status_gpus(RAY_STATUS) == 1.0
    assert ray_figures.ray_status_gpus(RAY_STATUS.replace("0.0/1.0 GPU", "")) is None


def test_preflight_json_gives_each_check_and_the_gemm_rate() -> None:
    from toolkit.preflight.load.device_checks import load_checks
    from toolkit.preflight.load.node import DeviceLoad, NodeLoad
    from toolkit.rundir.preflight import Check, PreflightRecord

    h200 = "NVIDIA H200"
    device = DeviceLoad("cuda:0", h200, "bf16", 612.34, 3900.0, 50.1, 49.8, samples=12)
    checks = load_checks({"localhost": NodeLoad("localhost", "bf16", 4.0, 8192, (device,))})
    record = PreflightRecord(
        "local",
        "fail",
        3.2,
        (
            Check("gpu.count", "localhost", "pass", "1 GPU(s)", "1"),
            Check("host.dev_shm", "localhost", "fail", "64 MiB", ">= 1 GiB", "mount more"),
            *checks,
        ),
    )
    found = ray_figures.preflight_figures(json.loads(json.dumps(record.to_json())))
    assert found["status"] == "fail" and found["load_ran"]
    assert found["gemm_tflops"] == [612.3]  # as the check's text rounds it (4 digits)
    assert found["counts"]["fail"] == 1 and sum(found["counts"].values()) == 2 + len(checks)
    assert found["failed"] == ["host.dev_shm on localhost: 64 MiB"]
    assert found["checks"]["gpu.count@localhost"] == "pass: 1 GPU(s)"
    assert ray_figures.gemm_tflops("612-640 TFLOP/s on 8 device(s)") == [612.0, 640.0]
    assert ray_figures.gemm_tflops("cuda:3 warn: 401.5 TFLOP/s (65% of the median 617)") == [401.5]


def test_ray_over_loop_ratio_per_worker_against_its_target() -> None:
    ratio = ray_figures.throughput_ratio(205_000.0, 216_000.0)
    assert ratio["ratio"] == pytest.approx(0.949, abs=1e-3) and not ratio["meets_target"]
    assert ray_figures.throughput_ratio(1_660_000.0, 216_000.0, workers=8)["meets_target"]
    assert ray_figures.throughput_ratio(None, 216_000.0)["ratio"] is None
    assert ray_figures.throughput_ratio(1.0, 0.0)["meets_target"] is False


def test_compiled_run_keeps_compile_time_apart_from_the_mfu() -> None:
    from toolkit.rundir.train import MetricsLine, TrainThroughput

    lines = [MetricsLine(1, 10.9, 62.0, 8192, 132.0, 1.5e-4, 1.0, 0.001, 58.5)]
    lines += [MetricsLine(2, 10.1, 3.1, 8192, 2643.0, 3e-4, 2.0, 0.05, 2.9)]
    lines += [
        MetricsLine(s, 10.0 - s / 4, 0.040 + (s % 2) / 100, 8192, 8192 / 0.04, 6e-4, 3.0, mfu)
        for s, mfu in zip(range(3, 21), [0.40, 0.36] * 9, strict=True)
    ]
    found = ray_figures.compiled_figures(json.loads(x.to_line()) for x in lines)
    assert found["compile_s"] == pytest.approx(61.4) and found["compile_steps"] == 2
    assert found["steady_steps"] == 18 and found["steps"] == 20
    rtk = TrainThroughput.of(lines)  # rtk's own reading of the same lines
    assert found["tokens_per_s"] == pytest.approx(rtk.tokens_per_s)
    assert found["mfu"] == pytest.approx(rtk.mfu)
    assert found["mfu"] == pytest.approx((0.40 * 0.05 + 0.36 * 0.04) / 0.09)
    assert not found["meets_target"] and found["median_mfu"] == pytest.approx(0.38)
    assert found["first_loss"] == 10.9 and found["last_loss"] == pytest.approx(5.0)
    eager = ray_figures.compiled_figures([json.loads(lines[-1].to_line())])
    assert eager["compile_s"] is None and eager["compile_steps"] == 0


def test_report_json_gives_energy_and_each_gpus_power() -> None:
    summary = {  # summary_dict's shape, cut to what is read
        "run": {
            "duration_s": 21.0,
            "energy_j": 9450.0,
            "steps": None,
            "tokens": None,
            "energy_per_token_j": None,
            "tokens_per_s": None,
        },
        "nodes": {
            "localhost": {
                "devices": {
                    "GPU-a": {
                        "kind": "gpu",
                        "energy_j": 9000.0,
                        "energy_source": "counter",
                        "avg_power_w": 428.6,
                        "peak_power_w": 611.0,
                    },
                    "host": {"kind": "host", "energy_j": 450.0, "avg_power_w": 21.4},
                }
            }
        },
        "cross_check": {"devices": [{"device": "GPU-a", "ratio": 0.996}]},
    }
    found = ray_figures.report_figures(summary)
    assert found["energy_and_power_present"]
    assert found["gpus"] == {
        "GPU-a": {
            "energy_j": 9000.0,
            "energy_source": "counter",
            "avg_power_w": 428.6,
            "peak_power_w": 611.0,
        }
    }
    assert found["power_over_counter"] == {"GPU-a": 0.996}
    del summary["nodes"]["localhost"]["devices"]["GPU-a"]
    assert not ray_figures.report_figures(summary)["energy_and_power_present"]


def test_peak_memory_from_nvml_rows() -> None:
    rows = [
        {"kind": "gpu", "device": "GPU-a", "memory_used_bytes": 2 * 2**30},
        {"kind": "gpu", "device": "GPU-a", "memory_used_bytes": 9 * 2**30},
        {"kind": "gpu_power", "device": "GPU-a", "power_w": 500.0},
        {"kind": "host", "device": "host", "memory_used_bytes": 99 * 2**30},
    ]
    assert ray_figures.peak_memory_gib(rows) == {"GPU-a": 9.0}


def test_two_power_limits_and_the_check_that_they_came_back() -> None:
    # control.py read's answer per GPU (toolkit/node/gpu_control.py read_settings).
    before = {
        "GPU-a": {
            "power_limit_w": 700.0,
            "default_power_limit_w": 700.0,
            "power_limit_min_w": 200.0,
        },
        "GPU-b": {
            "power_limit_w": 650.0,
            "default_power_limit_w": 700.0,
            "power_limit_min_w": 450.0,
        },
    }
    assert ray_figures.profile_limits(before) == [560.0, 450.0]  # 60% is below GPU-b's minimum
    assert (
        ray_figures.profile_limits({"GPU-a": {**before["GPU-a"], "power_limit_min_w": 600.0}})
        is None
    )
    assert ray_figures.profile_limits({"GPU-a": {"default_power_limit_w": None}}) is None
    back = ray_figures.restore_check(
        before, {"GPU-a": {"power_limit_w": 700.4}, "GPU-b": {"power_limit_w": 650.0}}
    )
    assert back["restored"] and back["problems"] == []
    assert back["per_gpu"]["GPU-a"]["at_default"] and not back["per_gpu"]["GPU-b"]["at_default"]
    left = ray_figures.restore_check(before, {"GPU-a": {"power_limit_w": 450.0}})
    assert not left["restored"]
    assert left["problems"] == [
        "GPU-a: power limit 450.0 W after rtk profile, 700.0 W before",
        "GPU-b: power limit None W after rtk profile, 650.0 W before",
    ]


def test_sweep_runs_read_from_runs_csv() -> None:
    from toolkit.profile.files import runs_columns

    header = runs_columns(["power_limit_w"])
    row = dict.fromkeys(header, "")
    row |= {
        "power_limit_w": "560.0",
        "run_id": "power_limit_w=560.0#1",
        "status": "succeeded",
        "tokens_per_s": "201000.5",
        "avg_power_w": "431.2",
        "energy_per_token_j": "0.0021",
    }
    failed = dict.fromkeys(header, "") | {
        "power_limit_w": "420.0",
        "status": "failed",
        "error": "job x FAILED",
    }
    text = (
        ",".join(header)
        + "\n"
        + "\n".join(",".join(r[h] for h in header) for r in (row, failed))
        + "\n"
    )
    runs = ray_figures.sweep_runs(text)
    assert runs[0]["power_limit_w"] == 560.0 and runs[0]["tokens_per_s"] == 201000.5
    assert runs[0]["status"] == "succeeded" and runs[0]["error"] is None
    assert runs[1] == {
        **dict.fromkeys(runs[1], None),
        "power_limit_w": 420.0,
        "status": "failed",
        "error": "job x FAILED",
    }


def test_the_profile_experiment_is_one_rtk_profile_plans(tmp_path: Path) -> None:
    ctx = StageContext(
        repo=str(REPO),
        work=str(tmp_path),
        python=sys.executable,
        gpus=(GpuInfo(0, "GPU-a", "H200"),),
    )
    path = ray_profile.write_files(ctx, [560.0, 420.0])
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "profile", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "2 run(s) to do" in done.stdout
    for limit in ("560.0", "420.0"):
        assert f"run power_limit_w={limit}#1: on 1 node(s); power_limit_w={limit}," in done.stdout
    assert '"model_size": "125M"' in done.stdout and '"learning_rate": 0.0006' in done.stdout
    assert '"baseline_s": 0.0, "cooldown_max_s": 0.0' in done.stdout


def test_kernels_ranked_from_a_real_profile() -> None:
    import torch

    a = torch.randn(256, 256)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            (a @ a).relu()
    rows = kernel_rows(prof.key_averages(), "cpu")
    assert kernel_rows(prof.key_averages(), "cuda") == []  # no CUDA events on a CPU
    top = top_kernels(rows, 3)
    assert len(top) == 3 and top[0]["ms"] >= top[1]["ms"] >= top[2]["ms"]
    assert any(k["kernel"] in ("aten::mm", "aten::matmul", "aten::relu") for k in top)
    merged = top_kernels([("k1", 300.0, 2), ("k2", 600.0, 1), ("k1", 100.0, 1)], 10)
    assert merged == [
        {"kernel": "k2", "ms": 0.6, "calls": 1, "share": 0.6},
        {"kernel": "k1", "ms": 0.4, "calls": 3, "share": 0.4},
    ]


def test_ray_stages_need_ray_and_a_cluster_but_ray_down_always_runs() -> None:
    up, train, down = by_name("ray-up"), by_name("ray-train"), by_name("ray-down")
    assert ray_skip_reason(by_name("train"), False, None) is None
    for spec in (up, train, down):
        assert ray_skip_reason(spec, False, None) == "Ray not importable"
    assert ray_skip_reason(up, True, None) is None
    assert ray_skip_reason(train, True, None) == "ray-up did not run: no Ray cluster"
    assert ray_skip_reason(down, True, None) == "ray-up did not run: no Ray cluster"
    failed = StageResult(
        "ray-up", "t", "failed", "rtk up --local failed", measurements={"cluster_up": False}
    )
    assert (
        ray_skip_reason(train, True, failed)
        == "ray-up brought no cluster up (rtk up --local failed)"
    )
    assert ray_skip_reason(down, True, failed) is None
    checks_failed = StageResult("ray-up", "t", "failed", "x", measurements={"cluster_up": True})
    assert ray_skip_reason(train, True, checks_failed) is None
    assert with_cluster(("sensor", "ray-mfu")) == ("sensor", "ray-up", "ray-mfu", "ray-down")
    assert with_cluster(("sensor",)) == ("sensor",)


def test_the_plain_pytorch_script_trains_on_the_cpu() -> None:
    script = REPO / "scripts" / "gpu_acceptance" / "plain_torch.py"
    assert "toolkit" not in script.read_text() and "gpu_acceptance" not in script.read_text()
    done = subprocess.run(
        [sys.executable, str(script), "--seconds", "0.5", "--width", "32", "--batch", "16"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"done: \d+ steps in [\d.]+ s on cpu, loss [\d.]+", done.stdout.strip().splitlines()[-1]
    )


def test_power_policy_compares_the_settled_steps_of_both_runs() -> None:
    def steps(joules: float, seconds: float) -> list[dict[str, object]]:
        return [
            {"step": s, "energy_j": joules, "duration_s": seconds, "complete": True}
            for s in range(100)
        ]

    power = [
        {"kind": "decision", "settled": False, "reason": "warm-up"},
        {"kind": "window", "first_step": 2},
        {"kind": "decision", "settled": True, "reason": "chose 450 W: ..."},
        {"kind": "window", "first_step": 60},
    ]
    found = ray_figures.power_policy_figures(steps(100.0, 1.0), steps(85.0, 1.03), power)
    assert found["settled_from_step"] == 60 and found["steps_compared"] == 40
    assert found["energy_saved"] == pytest.approx(0.15)
    assert found["slowdown"] == pytest.approx(0.03)
    assert found["meets_target"] and found["problems"] == []
    assert found["chosen"] == "chose 450 W: ..."
    line = ray_figures.power_policy_summary(found, {"restored": True})
    assert line.startswith("15.0% less energy per step, +3.0% time per step over 40")
    never = ray_figures.power_policy_figures(steps(100.0, 1.0), steps(85.0, 1.0), power[:2])
    assert never["problems"] == ["optimize never settled on a limit (power.jsonl): too few steps?"]
    assert "no comparison" in ray_figures.power_policy_summary(never, {"restored": False})


# -- --essentials: the one-command run for a GPU lent for one call ---------------------

ESSENTIAL_ORDER = [
    "setup",
    "ray-up",
    "ray-train",
    "ray-torchrun",
    "ray-power",
    "zeus-power",
    "ray-mfu",
    "ray-down",
]


def test_essentials_dry_run_lists_the_steps_in_order_within_540_s(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"  # a fresh clone has no .whl: name one
    wheelhouse.mkdir()
    done = acceptance("--essentials", "--dry-run", "--wheelhouse", str(wheelhouse), out=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    steps = [line.split() for line in out if re.match(r"  \d+ \S+ +\d+ s  ", line)]
    assert [s[1] for s in steps] == ESSENTIAL_ORDER
    budgets = [float(s[2]) for s in steps]
    assert all(b > 0 for b in budgets) and sum(budgets) <= 540
    assert "540 s budget" in out[1]

    def commands_of(name: str) -> list[str]:
        at = next(i for i, line in enumerate(out) if line.split()[1:2] == [name])
        block = []
        for line in out[at + 1 :]:
            if not line.startswith("      $ "):
                break
            block.append(line[len("      $ ") :])
        return block

    assert "offline" in next(line for line in out if line.split()[1:2] == ["setup"])
    assert commands_of("ray-up")[0] == "python -m toolkit up --local --json"
    train = commands_of("ray-train")
    assert [c.split("--strategy ")[1].split()[0] for c in train if " train " in c] == [
        "ddp",
        "fsdp2",
    ]  # no DeepSpeed in the one-command run
    (torchrun, report) = commands_of("ray-torchrun")
    assert torchrun.startswith("python -m toolkit torchrun --local --auto-steps ")
    assert torchrun.endswith("-- plain_torch.py --steps 1000")
    assert report == "python -m toolkit report $WORK/ray-runs/plain-ddp --json"
    power = commands_of("ray-power")
    assert [c.split("--power-policy ")[1] for c in power] == [
        "measure --compile off",
        "optimize --compile off",
    ]
    assert commands_of("zeus-power")[0].startswith("python -m gpu_acceptance.zeus_loop ")
    assert commands_of("ray-mfu")[0].endswith("--compile on")
    assert commands_of("ray-down")[0] == "python -m toolkit down --local --json"

    record = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    assert record["environment"]["essentials"] is True
    assert list(record["environment"]["stage_budgets_s"]) == ESSENTIAL_ORDER
    assert record["environment"]["selected_stages"] == ESSENTIAL_ORDER[1:]
    names = [s["name"] for s in record["stages"]]
    assert names[: len(ESSENTIAL_ORDER) - 1] == ESSENTIAL_ORDER[1:]  # run order first
    for stage in record["stages"]:
        chosen = stage["name"] in ESSENTIAL_ORDER
        assert stage["reason"].startswith("dry run: would" if chosen else "not selected")


def test_essentials_choose_their_own_stages(tmp_path: Path) -> None:
    done = acceptance("--essentials", "--stages", "sensor", "--dry-run", out=tmp_path / "o")
    assert done.returncode == 2
    assert "--essentials runs its own stages" in done.stderr


def test_the_checkout_leaves_room_for_the_wheelhouse_in_one_device_call() -> None:
    from gpu_acceptance.ray_archive import wheelhouse

    checkout_mib = wheelhouse.checkout_bytes(REPO) / wheelhouse.MIB
    total = checkout_mib + wheelhouse.MEASURED_WHEELHOUSE_MIB
    assert total <= wheelhouse.BUDGET_MIB, (
        f"checkout {checkout_mib:.1f} MiB + wheelhouse {wheelhouse.MEASURED_WHEELHOUSE_MIB} "
        f"MiB = {total:.1f} MiB, over the {wheelhouse.BUDGET_MIB:g} MiB a device call carries"
    )


def test_a_run_goes_by_its_plan_each_stage_its_budget_or_what_it_is_ahead() -> None:
    from gpu_acceptance.cli import parse
    from gpu_acceptance.runner import run_order

    options = parse(["--essentials", "--dry-run"])
    assert [s.name for s in run_order(options)][:7] == ESSENTIAL_ORDER[1:]
    assert options.budget_of("ray-power") == dict(options.budgets)["ray-power"]
    ends = [options.planned_end_s(n) for n in ESSENTIAL_ORDER]
    assert ends == sorted(ends) and ends[-1] == sum(b for _, b in options.budgets)
    assert options.planned_end_s("sensor") is None and options.budget_of("sensor") is None
    assert options.quick and options.strategies == ("ddp", "fsdp2") and not options.sdists


def test_flight_nccl_reads_a_dump_as_a_stall_reads_it() -> None:
    """The stage's reading of a dump, on a recorded gloo one (the GPU gives NCCL's)."""
    dump = json.loads(
        (REPO / "tests" / "data" / "flight_recorder" / "behind" / "rank0.json").read_text()
    )
    read = reading(dump)
    assert (read["entered"], read["finished"], read["members"]) == (
        {"0": 4},
        {"0": 3},
        {"0": [0, 1, 2]},
    )
    assert [c["op"] for c in read["collectives"]] == ["all_reduce"] * 4
