"""A node's error history graded: XIDs, DCGM and RDMA ports, end to end and by source.

End to end, ``facts.py`` runs as a real subprocess (``python -`` with its text on
stdin, as a transport feeds it) with stand-in ``journalctl``, ``dmesg`` and ``dcgmi``
on PATH; its answer goes through ``NodeFacts.from_json`` into ``history_checks``.
RDMA ports come from sysfs trees on disk; the runner passes the DCGM level on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from conftest import REPO
from fake_programs import args_of, fake_program
from scripted_transport import ScriptedTransport, answer

from toolkit.cluster.plan import build_plan
from toolkit.inventory import load_inventory
from toolkit.node import facts
from toolkit.node.common import read_port_files
from toolkit.node.facts import host_facts
from toolkit.nodeinfo import FACTS
from toolkit.nodeinfo.gpu_facts import GpuDeviceFacts, GpuFacts
from toolkit.nodeinfo.history_facts import DcgmFacts, KernelLogFacts
from toolkit.nodeinfo.host_facts import NodeFacts
from toolkit.preflight.history import grade
from toolkit.preflight.history.grade import (
    HistoryExpectation,
    expectation_for,
    history_checks,
    port_expectation,
)
from toolkit.preflight.history.ib_ports import PortExpectation
from toolkit.preflight.runner import FACTS_TIMEOUT_S, run_preflight
from toolkit.rundir.preflight import Check

DATA = REPO / "tests" / "data"
SYSFS = DATA / "sysfs"
GPU_NODE = HistoryExpectation(gpus=8)


def run_facts(tmp_path: Path, bin_dir: Path, dcgm_level: int = 0) -> dict[str, Any]:
    """``facts.py`` run as on a node, with only ``bin_dir`` on PATH; its JSON answer."""
    env = dict(os.environ, PATH=str(bin_dir))
    done = subprocess.run(
        [sys.executable, "-", str(tmp_path / "run"), str(dcgm_level)],
        input=FACTS.source(),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def by_name(checks: list[Check]) -> dict[str, Check]:
    assert len({c.name for c in checks}) == len(checks), checks
    return {c.name: c for c in checks}


def iso_ago(hours: float) -> str:
    """A ``journalctl -o short-iso`` time this long before now."""
    return (datetime.now(UTC) - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S+0000")


# -- end to end ---------------------------------------------------------------------------


def test_a_recent_fatal_xid_and_a_failed_dcgm_run_fail_the_gpu_node(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    log = (
        f"{iso_ago(30)} gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=812, name=python, "
        "Graphics Exception\n"
        f"{iso_ago(1)} gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen "
        "off the bus.\n"
        f"{iso_ago(1)} gpu7 kernel: nvidia-modeset: not an XID\n"
    )
    fake_program(bin_dir, "journalctl", stdout=log)
    fake_program(
        bin_dir, "dcgmi", stdout=(DATA / "dcgm/dcgm4-r2-fail.json").read_text(), exit_code=226
    )
    data = run_facts(tmp_path, bin_dir, dcgm_level=2)
    assert args_of(bin_dir, "dcgmi") == ["diag", "-r", "2", "-j"]
    node = NodeFacts.from_json("gpu7", data)
    assert node.to_json() == data
    assert node.kernel_log is not None and node.kernel_log.source == "journalctl"
    assert len(node.kernel_log.xid_lines) == 2
    assert node.dcgm is not None and node.dcgm.exit_code == 226
    checks = by_name(history_checks("gpu7", node, HistoryExpectation(gpus=8, dcgm_level=2)))
    assert set(checks) == {"gpu.xid", "gpu.dcgm_diag"}  # no RDMA device here
    xid = checks["gpu.xid"]
    assert (xid.scope, xid.status) == ("gpu7", "fail")
    assert "0000:3b:00: XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS x1 (last" in xid.measured
    assert "XID 13 ROBUST_CHANNEL_GR_EXCEPTION x1 (last 30 h ago" in xid.measured
    assert xid.measured.endswith(" (from journalctl)")
    dcgm = checks["gpu.dcgm_diag"]
    assert dcgm.status == "fail" and dcgm.measured.startswith("memory on GPU 1: fail: Detected 2")
    assert dcgm.threshold == "dcgmi diag -r 2: no failed test"


def test_old_xids_from_dmesg_warn_and_dcgm_absent_warns_naming_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, "journalctl", stdout="-- No entries --\n")
    fake_program(bin_dir, "dmesg", stdout=(DATA / "kernel_log/dmesg-iso.txt").read_text())
    data = run_facts(tmp_path, bin_dir, dcgm_level=1)
    assert data["dcgm"]["available"] is False
    node = NodeFacts.from_json("gpu7", data)
    checks = by_name(history_checks("gpu7", node, HistoryExpectation(gpus=8, dcgm_level=1)))
    assert checks["gpu.xid"].status == "warn"  # fatal, but long ago (2024)
    assert "XID 79" in checks["gpu.xid"].measured and "XID 74" in checks["gpu.xid"].measured
    assert checks["gpu.xid"].measured.endswith(" (from dmesg)")
    dcgm = checks["gpu.dcgm_diag"]
    assert dcgm.status == "warn"
    assert dcgm.measured == "dcgmi not found on the node's PATH (--dcgm-level 1 asks for it)"
    assert "--dcgm-level 0" in dcgm.hint


def test_an_unreadable_kernel_log_is_one_warn_on_a_gpu_node_and_nothing_on_a_cpu_node(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    fake_program(
        bin_dir,
        "dmesg",
        stderr="dmesg: read kernel buffer failed: Operation not permitted\n",
        exit_code=1,
    )
    data = run_facts(tmp_path, bin_dir)
    assert "dcgm" not in data
    node = NodeFacts.from_json("n1", data)
    (check,) = history_checks("n1", node, GPU_NODE)
    assert (check.name, check.status) == ("gpu.xid", "warn")
    assert check.measured == (
        "could not read the kernel log: journalctl: not found; "
        "dmesg: read kernel buffer failed: Operation not permitted"
    )
    assert "systemd-journal" in check.hint
    assert history_checks("n1", node, HistoryExpectation(gpus=0, dcgm_level=1)) == []


def test_a_clean_cpu_node_gets_no_history_check_and_a_gpu_node_a_pass(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, "journalctl", stdout=f"{iso_ago(2)} n1 kernel: Linux version 6.8\n")
    node = NodeFacts.from_json("n1", run_facts(tmp_path, bin_dir))
    assert node.kernel_log == KernelLogFacts("journalctl", (), 0, None)
    assert node.ib_ports == {} and node.dcgm is None
    assert history_checks("n1", node, HistoryExpectation()) == []
    (check,) = history_checks("n1", node, GPU_NODE)
    assert (check.name, check.status) == ("gpu.xid", "pass")
    assert check.measured == "no XID in the kernel log since boot (from journalctl)"


# -- grading details ----------------------------------------------------------------------


def bare_facts(tmp_path: Path, **changes: Any) -> NodeFacts:
    """This machine's host facts, with the history given."""
    data = json.loads(json.dumps(host_facts(str(tmp_path))))
    return dataclasses.replace(NodeFacts.from_json("n1", data), **changes)


def test_xids_name_the_gpu_by_its_nvml_index_and_say_when_lines_were_dropped(
    tmp_path: Path,
) -> None:
    line = f"{iso_ago(50)} n1 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=0, DBE"
    gpus = GpuFacts(
        available=True,
        count=1,
        devices=(GpuDeviceFacts("GPU-1", index=3, pci_bus_id="00000000:3B:00.0"),),
    )
    log = KernelLogFacts("journalctl", (line,), 250, None)
    node = bare_facts(tmp_path, gpus=gpus, kernel_log=log)
    (check,) = history_checks("n1", node, HistoryExpectation())
    assert check.status == "warn"
    assert check.measured.startswith("GPU 3: XID 48 ROBUST_CHANNEL_GPU_ECC_DBE x1 (last 2 d ago")
    assert check.measured.endswith(" (from journalctl; the last 1 of 250 XID lines)")


def test_xid_lines_on_a_node_without_gpus_are_still_graded(tmp_path: Path) -> None:
    line = f"{iso_ago(1)} n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, off the bus"
    node = bare_facts(tmp_path, kernel_log=KernelLogFacts("dmesg", (line,), 1, None))
    (check,) = history_checks("n1", node, HistoryExpectation())
    assert (check.name, check.status) == ("gpu.xid", "fail")


def test_dcgm_runs_that_did_not_finish_or_print_json_warn(tmp_path: Path) -> None:
    def graded(run: DcgmFacts) -> Check:
        node = bare_facts(tmp_path, dcgm=run)
        (check,) = [c for c in history_checks("n1", node, GPU_NODE) if c.name == "gpu.dcgm_diag"]
        return check

    timed_out = graded(DcgmFacts(1, True, error="dcgmi diag -r 1 timed out after 120 s"))
    assert (timed_out.status, timed_out.measured) == (
        "warn",
        "diagnostic incomplete: dcgmi diag -r 1 timed out after 120 s",
    )
    refused = graded(
        DcgmFacts(1, True, 255, "Error: unable to establish a connection to the specified host")
    )
    assert refused.status == "warn"
    assert refused.measured == (
        "diagnostic incomplete: dcgmi diag -r 1 exited 255: "
        "Error: unable to establish a connection to the specified host"
    )
    runtime = graded(DcgmFacts(1, True, 226, (DATA / "dcgm/dcgm-runtime-error.json").read_text()))
    assert runtime.status == "warn" and runtime.measured.startswith("diagnostic incomplete: ")
    passed = graded(DcgmFacts(1, True, 0, (DATA / "dcgm/dcgm4-r1-pass.json").read_text()))
    assert (passed.status, passed.measured) == ("pass", "2 result(s) passed (DCGM 4.2.3)")


def ports_of(tree: Path) -> dict[str, str]:
    return read_port_files(str(tree))


def port_statuses(tmp_path: Path, tree: Path, expect: HistoryExpectation) -> dict[str, str]:
    node = bare_facts(tmp_path, ib_ports=ports_of(tree))
    checks = history_checks("n1", node, expect)
    return {c.measured.split()[0] if c.name == "net.ib_port" else c.name: c.status for c in checks}


def test_ports_graded_without_expectation_and_against_the_profile(tmp_path: Path) -> None:
    ib = SYSFS / "ib"  # mlx5_0:1 ACTIVE, mlx5_1:1 DOWN / Polling
    assert port_statuses(tmp_path, ib, HistoryExpectation()) == {
        "mlx5_0:1": "pass",
        "mlx5_1:1": "warn",  # looks unused: only a warning
    }
    profile_ib, prefixes = port_expectation("ib")
    assert profile_ib == PortExpectation("ib", "InfiniBand", min_ports=1) and prefixes
    assert port_statuses(tmp_path, ib, HistoryExpectation(ports=profile_ib)) == {
        "mlx5_0:1": "pass",
        "mlx5_1:1": "warn",
        "net.ib_ports": "pass",
    }
    roce, _ = port_expectation("roce")
    assert port_statuses(tmp_path, ib, HistoryExpectation(ports=roce)) == {"net.ib_ports": "fail"}
    no_rdma = SYSFS / "ethernet"
    assert port_statuses(tmp_path, no_rdma, HistoryExpectation()) == {}
    assert port_statuses(tmp_path, no_rdma, HistoryExpectation(ports=profile_ib)) == {
        "net.ib_ports": "fail"
    }
    assert port_expectation("auto") == (None, False)
    assert port_expectation("ethernet") == (None, False)


def test_nccl_ib_hca_names_the_ports_in_use(tmp_path: Path) -> None:
    ib = SYSFS / "ib"

    def statuses(profile: str, hca: str) -> dict[str, str]:
        ports, prefixes = port_expectation(profile, hca)
        return port_statuses(tmp_path, ib, HistoryExpectation(ports=ports, hca_prefixes=prefixes))

    # A prefix names both HCAs: the one down is in use, so it fails.
    assert statuses("ib", "mlx5") == {
        "mlx5_0:1": "pass",
        "mlx5_1:1": "fail",
        "net.ib_ports": "pass",
    }
    assert statuses("auto", "=mlx5_0:1") == {"mlx5_0:1": "pass"}
    assert statuses("auto", "=mlx5_9") == {"net.ib_ports": "fail"}
    assert statuses("auto", "mlx5_1:1") == {"mlx5_1:1": "fail"}
    assert statuses("auto", "^mlx5_1") == {"mlx5_0:1": "pass", "mlx5_1:1": "warn"}


def inventory(tmp_path: Path, network: dict[str, Any]) -> Any:
    data = {
        "cluster": "history",
        "nodes": [
            {"host": "g1", "address": "10.0.0.1", "gpus": 8},
            {"host": "c1", "address": "10.0.0.2", "env": {"NCCL_IB_HCA": "=mlx5_0"}},
        ],
        "network": network,
        "ray": {"auth": "none"},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


def test_the_expectation_comes_from_the_inventory(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"profile": "ib", "env": {"NCCL_IB_HCA": "mlx5"}})
    gpu, cpu = inv.node("g1"), inv.node("c1")
    assert expectation_for(inv, gpu, 1) == HistoryExpectation(
        gpus=8,
        dcgm_level=1,
        ports=PortExpectation("ib", "InfiniBand", hcas=("mlx5",), min_ports=1),
        hca_prefixes=True,
    )
    # The node's own NCCL_IB_HCA wins over network.env, as in its env file.
    assert expectation_for(inv, cpu) == HistoryExpectation(
        ports=PortExpectation("ib", "InfiniBand", hcas=("mlx5_0",), min_ports=1)
    )
    auto = inventory(tmp_path, {})
    assert expectation_for(auto, auto.node("g1")) == HistoryExpectation(gpus=8)


def test_the_node_and_the_host_give_dcgm_the_same_time() -> None:
    assert dict(grade.DCGM_TIMEOUT_S) == facts.DCGM_TIMEOUT_S
    assert grade.dcgm_timeout_s(0) == 0.0  # no diag asked: no time for it
    for level, node_s in facts.DCGM_TIMEOUT_S.items():
        assert grade.dcgm_timeout_s(level) == node_s
    assert grade.dcgm_timeout_s(4) == max(facts.DCGM_TIMEOUT_S.values())  # a level it lacks


def test_the_runner_passes_the_level_and_grades_each_nodes_history(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {})
    plan = build_plan(inv)
    good = json.loads(json.dumps(host_facts(str(tmp_path / "run"))))
    good["gpus"] = {"available": False, "reason": "no pynvml"}
    good["kernel_log"] = {"source": None, "xid_lines": [], "xid_lines_total": 0, "error": "no"}
    good["dcgm"] = {"level": 1, "available": False, "error": "dcgmi is not on the node's PATH"}
    good["ib_ports"] = ports_of(SYSFS / "roce")
    transport = ScriptedTransport().on("*", r" - ", answer(good))
    began = time.monotonic()
    report = run_preflight(plan, transport, str(tmp_path / "run"), alive=set(), dcgm_level=1)
    assert time.monotonic() - began < 30
    for call in (c for c in transport.calls if c.kind == "run"):
        assert call.command.endswith(f"/run 1 {plan.paths.env_file}")
        assert call.timeout_s == FACTS_TIMEOUT_S + facts.DCGM_TIMEOUT_S[1]  # the node's level 1
    found = {(c.name, c.scope): c.status for c in report.checks}
    # g1 expects 8 GPUs: its unreadable log and missing dcgmi warn; c1 has none.
    assert found[("gpu.xid", "g1")] == found[("gpu.dcgm_diag", "g1")] == "warn"
    assert ("gpu.xid", "c1") not in found and ("gpu.dcgm_diag", "c1") not in found
    assert found[("net.ib_port", "g1")] == found[("net.ib_port", "c1")] == "pass"
