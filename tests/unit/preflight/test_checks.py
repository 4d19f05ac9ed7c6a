"""Preflight's grading on plain facts: thresholds, odd nodes, loopback names, ports, clocks."""

from __future__ import annotations

from typing import Any

from toolkit.nodeinfo.host_facts import HostFacts, SoftwareFacts
from toolkit.preflight import checks
from toolkit.preflight.result import Check, PreflightReport

GiB = 1024**3


def facts(**changes: Any) -> HostFacts:
    base: dict[str, Any] = {
        "hostname": "n1",
        "hostname_addresses": ("10.0.0.1",),
        "dev_shm_bytes": 16 * GiB,
        "memlock_bytes": None,
        "nofile": 1048576,
        "disk_path": "/data",
        "disk_free_bytes": 500 * GiB,
        "ephemeral_ports": (32768, 60999),
    }
    return HostFacts(**(base | changes))


def software(**versions: str) -> SoftwareFacts:
    return SoftwareFacts({"python": "3.11.7", "ray": "2.60.0", "torch": "2.13.0"} | versions)


def by_name(found: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in found}


def test_a_healthy_node_passes_every_host_check() -> None:
    found = checks.host_checks("n1", facts(), multi_node=True)
    assert {c.status for c in found} == {"pass"}


def test_tiny_shm_low_limits_and_full_disk_fail_with_hints() -> None:
    found = by_name(
        checks.host_checks(
            "n1",
            facts(dev_shm_bytes=64 * 1024**2, nofile=1024, disk_free_bytes=GiB // 2),
            multi_node=True,
        )
    )
    assert found["host.dev_shm"].status == "fail"
    assert found["host.dev_shm"].measured == "64 MiB"
    assert "remount" in found["host.dev_shm"].hint
    assert found["host.ulimit_nofile"].status == "fail"
    assert found["host.disk_free"].status == "fail"
    warn = by_name(checks.host_checks("n1", facts(dev_shm_bytes=GiB), multi_node=True))
    assert warn["host.dev_shm"].status == "warn"


def test_a_loopback_host_name_fails_only_when_there_are_other_nodes() -> None:
    looped = facts(hostname_addresses=("127.0.1.1",))
    multi = by_name(checks.host_checks("n1", looped, multi_node=True))
    assert multi["host.hostname"].status == "fail"
    assert "127.0.1.1" in multi["host.hostname"].measured
    alone = by_name(checks.host_checks("n1", looped, multi_node=False))
    assert alone["host.hostname"].status == "pass"


def test_pinned_ports_inside_the_ephemeral_range_fail_by_name() -> None:
    check = checks.port_range_check("n1", facts(), {"gcs": 6379, "dashboard": 40000})
    assert check.status == "fail" and "dashboard 40000" in check.measured
    assert checks.port_range_check("n1", facts(), {"gcs": 6379}).status == "pass"


def test_the_odd_version_out_fails_on_its_node_only() -> None:
    found = checks.version_checks(
        {
            "n1": software(),
            "n2": software(),
            "n3": software(python="3.11.9", ray="2.59.0", torch="2.13.0"),
        }
    )
    failed = {(c.name, c.scope) for c in found if c.status == "fail"}
    assert failed == {("software.ray", "n3")}  # python 3.11.x is the same minor


def test_clock_offsets_are_judged_against_the_head_with_their_error() -> None:
    found = by_name(checks.clock_checks({"head": (0.0, 0.05), "n2": (0.2, 0.05)}, "head"))
    assert found["host.clock_offset"].status == "pass"
    far = checks.clock_checks({"head": (0.0, 0.05), "n2": (12.0, 0.05)}, "head")
    assert far[0].status == "fail" and far[0].scope == "n2"


def test_report_status_and_exit_code() -> None:
    report = PreflightReport("c", [Check("a", "n1", "pass", "x"), Check("b", "n2", "warn", "y")])
    assert report.status == "warn" and report.exit_code == 0
    report.checks.append(Check("c", "n3", "fail", "z", "w", "fix it"))
    assert report.exit_code == 1
    text = report.render()
    problems = [line for line in text.splitlines() if line.startswith(("  FAIL", "  WARN"))]
    assert [line.split()[:3] for line in problems] == [["FAIL", "c", "n3"], ["WARN", "b", "n2"]]
    assert "hint: fix it" in text
    verbose = report.render(verbose=True).splitlines()
    assert verbose[1].startswith("  FAIL") and verbose[-1] == "  1 passed, 1 warned, 1 failed"
