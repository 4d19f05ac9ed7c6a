"""Each node script run the way rtk sends it: the assembled text fed to ``python -``.

The Python is isolated from rtk (``-I -S``: no current directory, no environment's
paths, no site-packages, where rtk is installed here), as on a node without rtk: an
import of rtk left in what is sent fails, and so does a name ``common.py`` should have
brought. Each script's JSON answer is checked.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit.cluster.plan import build_plan
from toolkit.gpu.limits_over_ssh import CONTROL
from toolkit.inventory import default_inventory
from toolkit.lifecycle.ray_logs import LOGPACK
from toolkit.nodeinfo import AGENT, FACTS, NodeScript
from toolkit.nodeinfo.reach_request import PeerPorts, ReachRequest, script_with
from toolkit.rundir import RunDir

NODE_PYTHON = [sys.executable, "-I", "-S", "-"]


def run_sent(text: str, *args: str) -> tuple[int, dict[str, Any]]:
    """``text`` run by an rtk-less Python with ``args``: its exit status and JSON answer."""
    done = subprocess.run(
        [*NODE_PYTHON, *args], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    return done.returncode, json.loads(lines[-1])


def test_the_node_python_here_has_no_rtk() -> None:
    done = subprocess.run(
        NODE_PYTHON, input="import toolkit\n", capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "No module named 'toolkit'" in done.stderr


@pytest.mark.parametrize(
    ("script", "usage"),
    [
        (AGENT, "usage: agent probe|stop|status|smoke|pack ARGS"),
        (LOGPACK, "usage: logpack TEMP_DIR OUT_PATH MAX_BYTES [SINCE_S]"),
        (CONTROL, "usage: argument command: invalid choice: 'nonsense'"),
    ],
)
def test_bad_usage_is_one_json_error_and_exit_2(script: NodeScript, usage: str) -> None:
    code, answer = run_sent(script.source(), "nonsense")
    assert code == 2 and answer["error"].startswith(usage)


def test_the_agent_packs_what_the_run_directory_says(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    wanted = [run.manifest, run.marker(0), run.metrics, run.node_dir("n1") / "trace-001.arrows"]
    for path in [*wanted, run.checkpoints_dir / "checkpoint_000001" / "model.pt"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    out = tmp_path / "out" / "pack.tar.gz"
    line = build_plan(default_inventory()).pack_command(str(run.root), str(out))
    code, answer = run_sent(AGENT.source(), *shlex.split(line)[2:])
    assert code == 0, answer
    expected = sorted(str(p.relative_to(run.root)) for p in wanted)
    assert sorted(answer["files"]) == expected
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == expected  # never a checkpoint
    code, answer = run_sent(AGENT.source(), "pack", str(tmp_path / "none"), str(out), "*.json")
    assert code == 3 and answer["error"].startswith("FileNotFoundError: no run directory")


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_the_facts_script_answers_with_its_reach_request(tmp_path: Path, listening: int) -> None:
    request = ReachRequest({"gcs": listening}, (PeerPorts("n1", "127.0.0.1", ("gcs",)),))
    code, answer = run_sent(script_with(FACTS.source(), request), str(tmp_path / "run"), "0")
    assert code == 0, answer
    assert answer["hostname"] == socket.gethostname()
    assert answer["reach"]["n1:gcs"]["ok"] is True
    assert answer["gpus"]["available"] is False  # no pynvml without site-packages
    assert isinstance(answer["ib_ports"], dict)


def test_the_log_packer_packs_a_temp_dir(tmp_path: Path) -> None:
    temp = tmp_path / "rtk-c"
    (temp / "rtk").mkdir(parents=True)
    (temp / "rtk" / "node.env").write_text("HF_TOKEN='hf_secret_value'\nRTK_CLUSTER='c'\n")
    out = tmp_path / "logs.tar.gz"
    code, answer = run_sent(LOGPACK.source(), str(temp), str(out), str(1 << 20))
    assert code == 0, answer
    assert answer["files"] == 1 and answer["path"] == str(out)
    with tarfile.open(out) as tar:
        env = tar.extractfile("rtk/node.env").read()  # type: ignore[union-attr]
    assert b"hf_secret_value" not in env and b"RTK_CLUSTER='c'" in env


def test_gpu_control_restores_nothing_without_a_file_and_fails_without_nvml(
    tmp_path: Path,
) -> None:
    record = str(tmp_path / "gpu-restore.json")
    code, answer = run_sent(CONTROL.source(), "restore", "--node", "n1", "--restore-file", record)
    assert code == 0 and answer["ok"] is True and answer["node"] == "n1"
    assert answer["result"]["nothing_to_do"] is True
    code, answer = run_sent(CONTROL.source(), "read", "--node", "n1")
    assert code == 3 and answer["error"].startswith("pynvml (nvidia-ml-py) does not import")
