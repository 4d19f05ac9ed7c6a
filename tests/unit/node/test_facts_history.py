"""The error history ``facts.py`` gathers on a node: kernel-log XIDs and DCGM.

First as this machine answers (no GPU, no ``dcgmi``, no RDMA device), then with
stand-in ``journalctl``, ``dmesg`` and ``dcgmi`` on PATH (``fake_programs``: real
subprocesses with scripted output). The RDMA ports' files are read by ``common.py``
(``tests/unit/node/test_common.py``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO
from fake_programs import args_of, fake_program

from toolkit.node import facts
from toolkit.node.common import read_port_files
from toolkit.node.facts import dcgm_diag, kernel_xids

KERNEL_LOGS = REPO / "tests" / "data" / "kernel_log"
DCGM = REPO / "tests" / "data" / "dcgm"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


def xid_lines_of(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if "NVRM: Xid" in line]


# -- this machine -------------------------------------------------------------------------


def test_this_machine_has_no_xid_no_rdma_port_and_dcgm_only_when_asked() -> None:
    log = kernel_xids()
    assert set(log) == {"source", "xid_lines", "xid_lines_total", "error"}
    assert log["xid_lines"] == [] and log["xid_lines_total"] == 0
    if log["source"] is None:  # neither tool readable here: both say why
        assert "journalctl: " in log["error"] and "dmesg: " in log["error"]
    else:
        assert log["source"] in ("journalctl", "dmesg") and log["error"] is None
    if not os.path.isdir("/sys/class/infiniband"):
        assert read_port_files() == {}
    assert dcgm_diag(0) is None
    run = dcgm_diag(1)
    assert run is not None and run["level"] == 1
    assert run["available"] is (shutil.which("dcgmi") is not None)
    if not run["available"]:
        assert run == {
            "level": 1,
            "available": False,
            "exit_code": None,
            "output": "",
            "stderr": "",
            "error": "dcgmi is not on the node's PATH",
        }


# -- the kernel log -----------------------------------------------------------------------


def test_journalctl_answers_and_only_its_xid_lines_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (KERNEL_LOGS / "journalctl-short-iso.txt").read_text()
    fake_program(tmp_path, "journalctl", stdout=text)
    fake_program(tmp_path, "dmesg", stdout="must not be read\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    log = kernel_xids()
    expected = xid_lines_of(KERNEL_LOGS / "journalctl-short-iso.txt")
    assert log == {
        "source": "journalctl",
        "xid_lines": expected,
        "xid_lines_total": len(expected),
        "error": None,
    }
    assert len(expected) >= 5
    assert args_of(tmp_path, "journalctl") == [
        "-k",
        "-o",
        "short-iso",
        "--no-pager",
        "--since",
        "-7 days",
    ]
    assert not (tmp_path / "dmesg.args").exists()


def test_an_empty_journal_falls_back_to_dmesg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_program(
        tmp_path, "journalctl", stdout="-- No entries --\n", stderr="No journal files were found.\n"
    )
    fake_program(tmp_path, "dmesg", stdout=(KERNEL_LOGS / "dmesg-iso.txt").read_text())
    monkeypatch.setenv("PATH", str(tmp_path))
    log = kernel_xids()
    assert log["source"] == "dmesg" and log["error"] is None
    assert log["xid_lines"] == xid_lines_of(KERNEL_LOGS / "dmesg-iso.txt")
    assert args_of(tmp_path, "dmesg") == ["--time-format", "iso"]


def test_neither_readable_says_what_each_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_program(
        tmp_path,
        "journalctl",
        stdout="-- No entries --\n",
        stderr="Hint: You are currently not seeing messages from other users and the system.\n",
    )
    fake_program(
        tmp_path,
        "dmesg",
        stderr="dmesg: read kernel buffer failed: Operation not permitted\n",
        exit_code=1,
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    assert kernel_xids() == {
        "source": None,
        "xid_lines": [],
        "xid_lines_total": 0,
        "error": "journalctl: Hint: You are currently not seeing messages from other users "
        "and the system.; dmesg: read kernel buffer failed: Operation not permitted",
    }


def test_no_tool_at_all_and_a_silent_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert kernel_xids()["error"] == "journalctl: not found; dmesg: not found"
    fake_program(tmp_path / "bin", "journalctl", exit_code=3)
    fake_program(tmp_path / "bin", "dmesg")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert kernel_xids()["error"] == "journalctl: exit status 3; dmesg: no entries"


def test_a_slow_journal_times_out_and_dmesg_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_program(
        tmp_path, "journalctl", stdout=f"2024-06-03T14:22:10+0000 h kernel: {XID}\n", sleep_s=5
    )
    fake_program(tmp_path, "dmesg", stdout=f"2024-06-03T14:22:10,000000+00:00 {XID}\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(facts, "KERNEL_LOG_TIMEOUT_S", 0.5)
    log = kernel_xids()
    assert log["source"] == "dmesg" and len(log["xid_lines"]) == 1


def test_the_last_lines_are_kept_and_long_ones_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = facts.XID_LINES_MAX + 50
    lines = [
        f"2024-06-03T{14 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}+0000 h kernel: {XID} #{i}"
        for i in range(total)
    ]
    lines[-1] += " x" * 400
    fake_program(tmp_path, "journalctl", stdout="\n".join(["boot", *lines]) + "\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    log = kernel_xids()
    assert log["xid_lines_total"] == total and len(log["xid_lines"]) == facts.XID_LINES_MAX
    assert log["xid_lines"][0].endswith("#50")
    assert log["xid_lines"][-1] == lines[-1][: facts.LINE_CHARS_MAX]
    assert len(json.dumps(log)) < facts.XID_LINES_MAX * (facts.LINE_CHARS_MAX + 10)


# -- DCGM ---------------------------------------------------------------------------------


def test_dcgmi_output_is_sent_compacted_with_its_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (DCGM / "dcgm4-r2-fail.json").read_text()
    fake_program(tmp_path, "dcgmi", stdout=text, exit_code=226)
    monkeypatch.setenv("PATH", str(tmp_path))
    run = dcgm_diag(2)
    assert run is not None
    assert args_of(tmp_path, "dcgmi") == ["diag", "-r", "2", "-j"]
    assert (run["level"], run["available"], run["exit_code"], run["error"]) == (2, True, 226, None)
    assert json.loads(run["output"]) == json.loads(text)
    assert "\n" not in run["output"] and len(run["output"]) < len(text)


def test_dcgmi_that_cannot_reach_its_host_engine_or_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = "Error: unable to establish a connection to the specified host: localhost"
    fake_program(tmp_path, "dcgmi", stdout=said + "\n", exit_code=255)
    monkeypatch.setenv("PATH", str(tmp_path))
    run = dcgm_diag(1)
    assert run is not None and (run["exit_code"], run["output"]) == (255, said)
    fake_program(tmp_path, "dcgmi", stdout="{}", sleep_s=5)
    monkeypatch.setattr(facts, "DCGM_TIMEOUT_S", {1: 0.5, 2: 1.0})
    run = dcgm_diag(1)
    assert run is not None and run["available"] is True and run["exit_code"] is None
    assert run["error"] == "dcgmi diag -r 1 timed out after 0.5 s"
