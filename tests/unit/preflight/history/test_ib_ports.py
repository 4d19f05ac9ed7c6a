"""InfiniBand/RoCE ports: read from a sysfs tree, parsed, checked against an expectation."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from toolkit.node.common import read_port_files
from toolkit.preflight.hardware import load_hardware
from toolkit.preflight.history.ib_ports import (
    COUNTER_MAX,
    IbPort,
    PortExpectation,
    parse_ports,
    port_checks,
)
from toolkit.rundir.preflight import Check

SYSFS = REPO / "tests" / "data" / "sysfs"
NDR = PortExpectation(label="ib-ndr", link_layer="InfiniBand", rate_gbit_s=400.0)

HEALTHY = {
    "state": "4: ACTIVE",
    "phys_state": "5: LinkUp",
    "rate": "400 Gb/sec (4X NDR)",
    "link_layer": "InfiniBand",
}
CLEAN = dict.fromkeys(COUNTER_MAX, "0")


def make_port(
    root: Path, hca: str, port: int, files: dict[str, str], counters: dict[str, str]
) -> None:
    """One port in a sysfs tree under ``root``, written as the kernel shows it."""
    base = root / "sys/class/infiniband" / hca / "ports" / str(port)
    (base / "counters").mkdir(parents=True)
    for name, text in files.items():
        (base / name).write_text(text + "\n")
    for name, text in counters.items():
        (base / "counters" / name).write_text(text + "\n")


def checks_of(root: Path, expect: PortExpectation = NDR) -> dict[str, Check]:
    found = port_checks("n1", parse_ports(read_port_files(str(root))), expect)
    return {c.measured.split()[0] if c.name == "net.ib_port" else c.name: c for c in found}


def test_a_healthy_ndr_node(tmp_path: Path) -> None:
    for i in range(4):
        make_port(tmp_path, f"mlx5_{i}", 1, HEALTHY, CLEAN)
    checks = checks_of(tmp_path, PortExpectation("ib-ndr", "InfiniBand", 400.0, min_ports=4))
    assert sorted(checks) == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1", "net.ib_ports"]
    port = checks["mlx5_0:1"]
    assert (port.name, port.scope, port.status) == ("net.ib_port", "n1", "pass")
    assert port.measured == "mlx5_0:1 InfiniBand ACTIVE LinkUp 400 Gb/sec (4X NDR)"
    assert port.threshold == "ACTIVE, LinkUp, >= 400 Gb/s, error counters within limits"
    assert checks["net.ib_ports"].status == "pass"
    assert checks["net.ib_ports"].measured == "4 InfiniBand port(s) (ib-ndr) ACTIVE"


def test_the_walk_reads_what_the_kernel_writes(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, HEALTHY, {**CLEAN, "symbol_error": "12"})
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("99\n")
    files = read_port_files(str(tmp_path))
    assert files["mlx5_0/1/state"] == "4: ACTIVE"
    assert files["mlx5_0/1/counters/symbol_error"] == "12"
    assert "mlx5_0/1/counters/port_xmit_data" not in files  # not an error counter
    (port,) = parse_ports(files)
    assert port == IbPort(
        hca="mlx5_0",
        port=1,
        state="ACTIVE",
        phys_state="LinkUp",
        link_layer="InfiniBand",
        rate="400 Gb/sec (4X NDR)",
        rate_gbit_s=400.0,
        counters={**dict.fromkeys(COUNTER_MAX, 0), "symbol_error": 12},
    )
    assert port.name == "mlx5_0:1"


def test_no_infiniband_class_reads_nothing(tmp_path: Path) -> None:
    assert read_port_files(str(tmp_path)) == {}
    checks = checks_of(tmp_path)
    assert list(checks) == ["net.ib_ports"]
    assert checks["net.ib_ports"].status == "fail"
    assert checks["net.ib_ports"].measured == "no InfiniBand port(s) (ib-ndr) found"


def test_a_degraded_rate_fails(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, {**HEALTHY, "rate": "200 Gb/sec (2X NDR)"}, CLEAN)
    port = checks_of(tmp_path)["mlx5_0:1"]
    assert port.status == "fail" and port.measured.endswith("200 Gb/sec (2X NDR)")
    assert "trained below its rate" in port.hint


def test_a_faster_port_than_expected_passes(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, HEALTHY, CLEAN)
    hdr = PortExpectation("ib-hdr", "InfiniBand", 200.0)
    assert checks_of(tmp_path, hdr)["mlx5_0:1"].status == "pass"


@pytest.mark.parametrize(
    ("state", "phys", "explicit", "status"),
    [
        ("1: DOWN", "2: Polling", False, "warn"),  # not cabled: maybe unused
        ("1: DOWN", "3: Disabled", False, "warn"),
        ("1: DOWN", "2: Polling", True, "fail"),  # named as in use: must be up
        ("2: INIT", "5: LinkUp", False, "fail"),  # cabled, no subnet manager
        ("3: ARMED", "5: LinkUp", False, "fail"),
        ("1: DOWN", "6: LinkErrorRecovery", False, "fail"),
        ("4: ACTIVE", "6: LinkErrorRecovery", False, "fail"),
    ],
)
def test_ports_that_are_not_up(
    tmp_path: Path, state: str, phys: str, explicit: bool, status: str
) -> None:
    make_port(tmp_path, "mlx5_0", 1, {**HEALTHY, "state": state, "phys_state": phys}, CLEAN)
    expect = PortExpectation("ib-ndr", "InfiniBand", 400.0, hcas=("mlx5_0",) if explicit else ())
    port = checks_of(tmp_path, expect)["mlx5_0:1"]
    assert port.status == status
    assert "the port is not up" in port.hint


def test_error_counters_warn_and_saturation_is_marked(tmp_path: Path) -> None:
    counters = {**CLEAN, "link_downed": "3", "symbol_error": "65535", "port_rcv_errors": "junk"}
    make_port(tmp_path, "mlx5_0", 1, HEALTHY, counters)
    port = checks_of(tmp_path)["mlx5_0:1"]
    assert port.status == "warn"
    assert port.measured == (
        "mlx5_0:1 InfiniBand ACTIVE LinkUp 400 Gb/sec (4X NDR); "
        "link_downed 3, symbol_error 65535 (saturated)"
    )
    lenient = PortExpectation(
        "ib-ndr", "InfiniBand", 400.0, counter_limits={"symbol_error": 100000}
    )
    assert checks_of(tmp_path, lenient)["mlx5_0:1"].status == "pass"


def test_a_down_port_fails_whatever_its_counters(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, {**HEALTHY, "state": "2: INIT"}, {**CLEAN, "link_downed": "9"})
    port = checks_of(tmp_path)["mlx5_0:1"]
    assert port.status == "fail" and port.measured.endswith("link_downed 9")


def test_only_the_expected_link_layer_is_the_fabric(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, HEALTHY, CLEAN)
    ethernet = {**HEALTHY, "link_layer": "Ethernet", "rate": "100 Gb/sec (4X EDR)"}
    make_port(tmp_path, "mlx5_bond_0", 1, ethernet, {})  # a RoCE port with no readable counters
    assert sorted(checks_of(tmp_path)) == ["mlx5_0:1"]
    roce = PortExpectation.from_spec(load_hardware().interconnect("roce-100g"))
    checks = checks_of(tmp_path, roce)
    assert sorted(checks) == ["mlx5_bond_0:1"] and checks["mlx5_bond_0:1"].status == "pass"
    roce_400 = PortExpectation.from_spec(load_hardware().interconnect("roce-400g"))
    assert checks_of(tmp_path, roce_400)["mlx5_bond_0:1"].status == "fail"


def test_named_ports_must_exist(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, HEALTHY, CLEAN)
    make_port(
        tmp_path, "mlx5_0", 2, {**HEALTHY, "state": "1: DOWN", "phys_state": "3: Disabled"}, CLEAN
    )
    expect = PortExpectation("ib-ndr", "InfiniBand", 400.0, hcas=("mlx5_0:1", "mlx5_4"))
    checks = checks_of(tmp_path, expect)
    assert sorted(checks) == ["mlx5_0:1", "net.ib_ports"]  # port 2 is not named: not checked
    assert checks["net.ib_ports"].status == "fail"
    assert checks["net.ib_ports"].measured == "no such port: mlx5_4"


def test_too_few_active_ports(tmp_path: Path) -> None:
    make_port(tmp_path, "mlx5_0", 1, HEALTHY, CLEAN)
    make_port(
        tmp_path, "mlx5_1", 1, {**HEALTHY, "state": "1: DOWN", "phys_state": "2: Polling"}, CLEAN
    )
    checks = checks_of(tmp_path, PortExpectation("ib-ndr", "InfiniBand", 400.0, min_ports=2))
    assert checks["net.ib_ports"].status == "fail"
    assert checks["net.ib_ports"].measured == "1 of 2 InfiniBand port(s) (ib-ndr) ACTIVE"


def test_the_recorded_hdr_tree() -> None:
    # tests/data/sysfs/ib: mlx5_0:1 ACTIVE HDR, mlx5_1:1 DOWN/Polling; no counters.
    spec = load_hardware().interconnect("ib-hdr")
    checks = checks_of(SYSFS / "ib", PortExpectation.from_spec(spec))
    assert checks["mlx5_0:1"].status == "pass"
    assert checks["mlx5_0:1"].measured == "mlx5_0:1 InfiniBand ACTIVE LinkUp 200 Gb/sec (4X HDR)"
    assert checks["mlx5_1:1"].status == "warn"  # down and polling: looks unused
    named = checks_of(SYSFS / "ib", PortExpectation.from_spec(spec, hcas=("mlx5_1",)))
    assert named["mlx5_1:1"].status == "fail"  # named as in use


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"mlx5_0/1/state": "ACTIVE"}, IbPort("mlx5_0", 1, state="ACTIVE")),  # no code before it
        ({"mlx5_0/1/state": "  "}, IbPort("mlx5_0", 1)),
        ({"mlx5_0/1/rate": "fast"}, IbPort("mlx5_0", 1, rate="fast")),
        (
            {"mlx5_0/1/rate": "2.5 Gb/sec (1X SDR)"},
            IbPort("mlx5_0", 1, rate="2.5 Gb/sec (1X SDR)", rate_gbit_s=2.5),
        ),
        ({"mlx5_0/1/counters/link_downed": "-1"}, IbPort("mlx5_0", 1)),
        ({"mlx5_0/x/state": "4: ACTIVE", "mlx5_0": "?", "a/1": "?"}, None),  # not port files
    ],
)
def test_parsing_odd_files(files: dict[str, str], expected: IbPort | None) -> None:
    assert parse_ports(files) == ([] if expected is None else [expected])


def test_ports_come_out_in_order(tmp_path: Path) -> None:
    files = {
        "mlx5_1/1/state": "4: ACTIVE",
        "mlx5_0/2/state": "4: ACTIVE",
        "mlx5_0/10/state": "1: DOWN",
    }
    assert [p.name for p in parse_ports(files)] == ["mlx5_0:2", "mlx5_0:10", "mlx5_1:1"]
