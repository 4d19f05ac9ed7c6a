"""``common.py``, what the node scripts share: their ``main``, and the RDMA ports' files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from toolkit.node import common
from toolkit.node.common import (
    FAILED_EXIT,
    IB_COUNTER_MAX,
    USAGE_EXIT,
    ScriptError,
    UsageError,
    read_port_files,
    run_command,
    run_main,
)

SYSFS = REPO / "tests" / "data" / "sysfs"


# -- main: one JSON line, an exit status, never a traceback -----------------------------------


def answer_of(capsys: pytest.CaptureFixture[str], code: int) -> tuple[int, Any]:
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    return code, json.loads(lines[0])


def fail(error: Exception) -> dict[str, Any]:
    raise error


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: {"files": 2}, (0, {"files": 2})),
        (lambda: fail(UsageError("logpack OUT")), (USAGE_EXIT, {"error": "usage: logpack OUT"})),
        (
            lambda: fail(ScriptError("needs root on n1", {"restored": True})),
            (FAILED_EXIT, {"error": "needs root on n1", "result": {"restored": True}}),
        ),
        (
            lambda: fail(FileNotFoundError("no /t on this node")),
            (FAILED_EXIT, {"error": "FileNotFoundError: no /t on this node"}),
        ),
    ],
)
def test_run_main_prints_one_json_line_and_says_how_it_went(
    capsys: pytest.CaptureFixture[str], call: Any, expected: tuple[int, Any]
) -> None:
    assert answer_of(capsys, run_main(call)) == expected


def test_run_command_runs_the_named_command_with_the_rest_as_its_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    commands = {"echo": lambda *args: {"args": list(args)}, "stop": lambda: {}}
    assert answer_of(capsys, run_command("agent", commands, ["echo", "a", "b"])) == (
        0,
        {"args": ["a", "b"]},
    )
    usage = {"error": "usage: agent echo|stop ARGS"}
    assert answer_of(capsys, run_command("agent", commands, [])) == (USAGE_EXIT, usage)
    assert answer_of(capsys, run_command("agent", commands, ["reboot"])) == (USAGE_EXIT, usage)
    code, answer = answer_of(capsys, run_command("agent", commands, ["stop", "extra"]))
    assert code == FAILED_EXIT and answer["error"].startswith("TypeError: ")


# -- the RDMA ports' files --------------------------------------------------------------------


def test_port_files_of_recorded_trees() -> None:
    ib = read_port_files(str(SYSFS / "ib"))
    assert ib["mlx5_0/1/state"] == "4: ACTIVE"
    assert ib["mlx5_0/1/rate"] == "200 Gb/sec (4X HDR)"
    assert ib["mlx5_0/1/link_layer"] == "InfiniBand"
    assert ib["mlx5_1/1/phys_state"] == "2: Polling"
    assert {key.split("/", 2)[2] for key in ib} <= {
        *common.IB_PORT_FILES,
        *(f"counters/{name}" for name in IB_COUNTER_MAX),
    }  # never the GIDs, LIDs or anything else of the port
    assert read_port_files(str(SYSFS / "roce"))["mlx5_0/1/link_layer"] == "Ethernet"
    assert read_port_files(str(SYSFS / "ethernet")) == {}


def test_port_files_with_counters_and_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for hca in ("mlx5_0", "mlx5_1", "mlx5_2"):
        base = tmp_path / "sys/class/infiniband" / hca / "ports" / "1"
        (base / "counters").mkdir(parents=True)
        (base / "state").write_text("4: ACTIVE\n")
        (base / "rate").write_text("400 Gb/sec (4X NDR)\n" + "x" * 500)
        for name in IB_COUNTER_MAX:
            (base / "counters" / name).write_text("7\n")
        (base / "counters" / "port_xmit_discards").write_text("9\n")  # congestion: not read
    found = read_port_files(str(tmp_path))
    assert found["mlx5_2/1/counters/symbol_error"] == "7"
    assert "mlx5_2/1/counters/port_xmit_discards" not in found
    assert len(found["mlx5_0/1/rate"]) == common.IB_VALUE_MAX_CHARS
    monkeypatch.setattr(common, "IB_PORTS_MAX", 2)
    assert {k.split("/")[0] for k in read_port_files(str(tmp_path))} == {"mlx5_0", "mlx5_1"}
