"""XID events from kernel logs: parsing, grouping, time since, grading."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest import REPO

from toolkit.preflight.history.errlog import (
    XIDS,
    XidEvent,
    group_xids,
    normalize_bus_id,
    parse_xid_events,
    xid_checks,
)

LOGS = REPO / "tests" / "data" / "kernel_log"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- parsing ---------------------------------------------------------------------------


def test_journalctl_short_iso_lines() -> None:
    events = parse_xid_events(read("journalctl-short-iso.txt"))
    assert [(e.bus_id, e.code) for e in events] == [
        ("0000:3b:00", 79),
        ("0000:5e:00", 13),
        ("0000:5e:00", 13),
        ("0000:5e:00", 43),
        ("0000:86:00", 63),
        ("0000:86:00", 48),
        ("0000:86:00", 94),
        ("0000:af:00", 119),
        ("0000:af:00", 999),
    ]  # the line cut short after the bus and the boot separator are skipped
    first = events[0]
    assert first == XidEvent(
        bus_id="0000:3b:00",
        code=79,
        time=at("2024-06-03T14:22:10+00:00"),
        pid=0,
        process=None,
        message="GPU has fallen off the bus.",
    )


def test_pid_and_process_forms() -> None:
    events = parse_xid_events(read("journalctl-short-iso.txt"))
    unknown, named = events[1], events[2]
    assert (unknown.pid, unknown.process) == (None, None)  # pid='<unknown>', name=<unknown>
    assert unknown.message.startswith("Graphics Exception: ESR 0x514730")
    assert (named.pid, named.process) == (48213, "python3")
    assert named.message.startswith("Graphics Exception: ChID 0010")
    gsp = events[7]
    assert (gsp.pid, gsp.process) == (2211, "nvidia-smi")
    assert gsp.message.startswith("Timeout after 6s of waiting for RPC response")


def test_dmesg_iso_lines_keep_their_zone() -> None:
    events = parse_xid_events(read("dmesg-iso.txt"))
    assert [(e.bus_id, e.code) for e in events] == [("0000:3b:00", 79), ("0000:af:00", 74)]
    assert events[0].time == at("2024-06-03T14:22:10.118263+00:00")
    assert events[1].time == at("2024-06-03T15:00:00.004120+00:00")  # +02:00 in the log
    assert events[1].process == "python"


def test_plain_dmesg_lines_are_undated() -> None:
    events = parse_xid_events(read("dmesg-plain.txt"))
    assert [(e.code, e.time, e.pid) for e in events] == [(32, None, None), (62, None, None)]
    assert events[0].message == "Channel ID 00000005 intr 00008000"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "NVRM: Xid",
        "NVRM: Xid (PCI:0000:3b:00): ",
        "NVRM: Xid (PCI:0000:3b:00): seventy-nine, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:zzzz:3b:00): 79, x",
        "\x00\xff garbage \u2603 NVRM: Xid (PCI:0000:3b",
        "kernel: nvidia-modeset: ERROR: GPU:0: Error while waiting for GPU progress",
    ],
)
def test_garbage_and_partial_lines_are_skipped(line: str) -> None:
    assert parse_xid_events(line) == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # a time without a zone cannot be placed: undated
        ("2024-06-03T14:22:10 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", None),
        (
            "2024-06-03T14:22:10Z host kernel: NVRM: Xid (PCI:0000:3b:00): 79, x",
            "2024-06-03T14:22:10+00:00",
        ),
        (
            "2024-06-03T14:22:10.5+01:00 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, x",
            "2024-06-03T13:22:10.5+00:00",
        ),
        # a time that is not a date at all
        ("2024-13-45T99:99:99+0000 host kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", None),
    ],
)
def test_times(line: str, expected: str | None) -> None:
    (event,) = parse_xid_events(line)
    assert event.time == (None if expected is None else at(expected))


def test_text_after_the_address_and_no_message() -> None:
    # Anything between the address and the closing parenthesis is not the address.
    text = (
        "NVRM: Xid (PCI:0000:65:00.0 GPU-I:02 GPU-CI:00): 43, pid=7, name=a, Ch 00000010\n"
        "NVRM: Xid (PCI:0000:65:00): 45\n"
        "NVRM: Xid (0000:65:00): 45, pid=7, Ch 00000010\n"
    )
    events = parse_xid_events(text)
    assert [(e.bus_id, e.code, e.message) for e in events] == [
        ("0000:65:00", 43, "Ch 00000010"),
        ("0000:65:00", 45, ""),
        ("0000:65:00", 45, "Ch 00000010"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00"),  # NVML's busId
        ("0000:3b:00", "0000:3b:00"),  # the log's
        ("0000:3B:00.1", "0000:3b:00"),
        ("3b:00", "3b:00"),  # not an address: left as it is, lower case
    ],
)
def test_bus_ids(text: str, expected: str) -> None:
    assert normalize_bus_id(text) == expected


# -- grouping and time since -----------------------------------------------------------


def test_grouping_counts_and_spans() -> None:
    groups = group_xids(parse_xid_events(read("journalctl-short-iso.txt")))
    keys = [(g.bus_id, g.code, g.count) for g in groups]
    assert keys == [
        ("0000:3b:00", 79, 1),
        ("0000:5e:00", 13, 2),
        ("0000:5e:00", 43, 1),
        ("0000:86:00", 48, 1),
        ("0000:86:00", 63, 1),
        ("0000:86:00", 94, 1),
        ("0000:af:00", 119, 1),
        ("0000:af:00", 999, 1),
    ]
    thirteen = groups[1]
    assert thirteen.first == thirteen.last == at("2024-06-03T15:02:44+00:00")
    assert thirteen.last_message.startswith("Graphics Exception: ChID 0010")
    assert thirteen.info == XIDS[13] and thirteen.info.severity == "app"
    assert groups[-1].info.severity == "unknown"


def test_time_since_uses_the_given_now() -> None:
    (group,) = group_xids(parse_xid_events(read("dmesg-iso.txt"))[:1])
    now = at("2024-06-03T15:22:10.118263+00:00")
    assert group.since_last_s(now) == 3600.0
    assert group.since_last_s(now + timedelta(days=2)) == 3600.0 + 2 * 86400
    undated = group_xids(parse_xid_events(read("dmesg-plain.txt")))
    assert undated[0].since_last_s(now) is None and undated[0].first is None


# -- grading ---------------------------------------------------------------------------


def grade(text: str, now: datetime, **kwargs: object) -> tuple[str, str]:
    (check,) = xid_checks("n1", group_xids(parse_xid_events(text)), now, **kwargs)  # type: ignore[arg-type]
    assert check.name == "gpu.xid" and check.scope == "n1"
    return check.status, check.measured


def test_a_recent_fatal_xid_fails_and_names_the_gpu() -> None:
    now = at("2024-06-03T18:00:00+00:00")
    status, measured = grade(
        read("journalctl-short-iso.txt"), now, gpus={"0000:3b:00": "GPU 0 (GPU-7f3c2a51)"}
    )
    assert status == "fail"
    assert measured.startswith(
        "GPU 0 (GPU-7f3c2a51): XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS x1 "
        "(last 4 h ago; reboot the node)"
    )
    assert "0000:5e:00: XID 13 ROBUST_CHANNEL_GR_EXCEPTION x2 (last 3 h ago" in measured
    assert "0000:af:00: XID 999 XID_999 x1" in measured


def test_an_old_fatal_xid_only_warns() -> None:
    text = "2024-06-01T00:00:00+00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n"
    status, measured = grade(text, at("2024-06-03T00:00:00+00:00"))
    assert status == "warn" and "last 2 d ago" in measured
    assert grade(text, at("2024-06-01T23:00:00+00:00"))[0] == "fail"
    assert grade(text, at("2024-06-03T00:00:00+00:00"), recent_s=3 * 86400)[0] == "fail"


def test_an_undated_fatal_xid_warns() -> None:
    status, measured = grade(read("dmesg-plain.txt"), datetime.now(UTC))
    assert status == "warn"
    assert "XID 62 PMU_HALT_ERROR x1 (undated; reset the GPU)" in measured
    assert "XID 32 XID_32" in measured  # not in the table: unknown, warns


def xid_line(code: int) -> str:
    return f"2024-06-03T12:00:00+00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, x\n"


@pytest.mark.parametrize("code", [13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120])
def test_the_codes_the_issue_names_are_known_by_name(code: int) -> None:
    _, measured = grade(xid_line(code), at("2024-06-03T12:00:30+00:00"))
    assert f"XID {code} " in measured and f"XID_{code}" not in measured  # not "unknown"


@pytest.mark.parametrize("code", [48, 64, 74, 79, 95, 119])
def test_a_recent_xid_the_issue_calls_fatal_fails_the_node(code: int) -> None:
    assert grade(xid_line(code), at("2024-06-03T12:00:30+00:00"))[0] == "fail"


def test_application_faults_warn_while_recent_then_pass() -> None:
    text = "2024-06-03T12:00:00+00:00 h kernel: NVRM: Xid (PCI:0000:5e:00): 31, pid=9, MMU Fault\n"
    assert grade(text, at("2024-06-03T13:00:00+00:00"))[0] == "warn"
    assert grade(text, at("2024-06-05T13:00:00+00:00"))[0] == "pass"


def test_informational_codes_pass_but_are_listed() -> None:
    text = (
        "2024-06-03T12:00:00+00:00 h kernel: NVRM: Xid (PCI:0000:86:00): 63, pid=1, Row Remapper\n"
        "2024-06-03T12:00:01+00:00 h kernel: NVRM: Xid (PCI:0000:86:00): 92, pid=1, SBE\n"
    )
    status, measured = grade(text, at("2024-06-03T12:00:30+00:00"))
    assert status == "pass"
    assert "XID 63 INFOROM_DRAM_RETIREMENT_EVENT x1 (last 30 s ago" in measured
    assert "XID 92" in measured


def test_a_clean_log_passes() -> None:
    (check,) = xid_checks("n1", [], datetime.now(UTC))
    assert check.status == "pass" and check.hint == ""
    assert check.measured == "no XID in the kernel log since boot"
