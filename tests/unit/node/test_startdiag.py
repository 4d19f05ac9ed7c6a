"""The node's start diagnosis on real files, sockets and mounts of this machine."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.node.common import mount_of, port_holders, ray_facts, temp_dir_facts
from toolkit.node.startdiag import diagnose, newest_session, ray_logs, reach, tail_lines
from toolkit.nodeinfo.script import sent_source


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def _session(temp: Path, name: str, logs: dict[str, str]) -> Path:
    session = temp / name
    (session / "logs").mkdir(parents=True)
    for file, text in logs.items():
        (session / "logs" / file).write_text(text)
    return session


def test_the_newest_sessions_log_errors_are_read_and_bounded(tmp_path: Path) -> None:
    _session(tmp_path, "session_2026-01-01_00-00-00_1", {"raylet.out": "[old] E 1 1] stale\n"})
    new = _session(
        tmp_path,
        "session_2026-11-27_14-41-00_677214_259",
        {
            "raylet.out": "".join(
                f"[2026-11-27 14:41:01,{i:03} I 365 365] fine {i}\n" for i in range(100)
            )
            + "[2026-11-27 14:41:02,000 E 365 365] Failed to register with the GCS\n",
            "gcs_server.err": "",
        },
    )
    (tmp_path / "session_latest").symlink_to(new)
    assert newest_session(str(tmp_path)) == str(new)
    logs = ray_logs(str(tmp_path))
    assert len(logs["tails"]["raylet.out"]) == 30
    assert logs["errors"] == [
        "raylet.out: [2026-11-27 14:41:02,000 E 365 365] Failed to register with the GCS"
    ]
    assert ray_logs(str(tmp_path / "none")) == {"session": None, "tails": {}, "errors": []}


def test_a_long_line_and_a_cut_first_line_are_trimmed(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("a" * 1000 + "\n" + "b" * 500 + "\nlast\n")
    assert tail_lines(str(log), limit=600) == ["b" * 300, "last"]
    assert tail_lines(str(tmp_path / "missing")) is None


def test_port_holders_name_the_program_and_pid(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    held = port_holders([port, 1])
    assert list(held) == [port]
    assert held[port].endswith(f"(pid {__import__('os').getpid()})")


def test_reach_tells_an_open_port_from_a_refused_one(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    free = closed.getsockname()[1]
    closed.close()
    answers = reach("127.0.0.1", [port, free])
    assert answers[str(port)] is None
    assert answers[str(free)] == "Connection refused"


def test_the_temp_dir_stamp_finds_another_host_and_the_mount(tmp_path: Path) -> None:
    temp = str(tmp_path / "ray")
    first = temp_dir_facts(temp, "node1", stamp=True)
    assert first["write_error"] is None and first["other_hosts"] == []
    second = temp_dir_facts(temp, "node2", stamp=True)
    assert second["other_hosts"] == ["node1"]
    assert second["fs_type"] == mount_of(str(tmp_path))["fs_type"] is not None
    assert second["free_bytes"] > 0


def test_the_stamp_keeps_rtks_directory_private(tmp_path: Path) -> None:
    temp = tmp_path / "ray"
    temp_dir_facts(str(temp), "node1", stamp=True)
    assert (temp / "rtk").stat().st_mode & 0o777 == 0o700
    assert (temp / "rtk" / "hosts").stat().st_mode & 0o777 == 0o700


def test_a_temp_dir_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    facts = temp_dir_facts(str(blocker / "ray"), "node1", stamp=True)
    assert facts["write_error"] is not None and "Not a directory" in facts["write_error"]


def test_mount_of_picks_the_longest_mount_point(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "30 22 0:40 / /mnt/shared ro,relatime shared:9 - nfs4 srv:/x rw\n"
    )
    assert mount_of("/mnt/shared/ray/x", str(mountinfo)) == {
        "mount_point": "/mnt/shared",
        "fs_type": "nfs4",
        "read_only": True,
    }
    assert mount_of("/mnt/sharedX", str(mountinfo))["fs_type"] == "ext4"


def test_ray_facts_read_this_pythons_ray_version() -> None:
    facts = ray_facts()
    assert facts["executable"] == sys.executable
    assert facts["error"] is None and facts["version"].count(".") >= 1


def test_the_script_as_sent_answers_one_json_line(tmp_path: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    source = sent_source("toolkit.node", "startdiag.py")
    done = subprocess.run(
        [sys.executable, "-", str(tmp_path), f"{port},1", "127.0.0.1", str(port)],
        input=source,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(done.stdout.splitlines()[-1])
    assert set(answer) == {"hostname", "temp_dir", "ray", "ports", "reach", "logs"}
    assert list(answer["ports"]) == [str(port)]
    assert answer["reach"] == {str(port): None}
    here = diagnose(str(tmp_path), "")["temp_dir"]
    for facts in (answer["temp_dir"], here):
        del facts["free_bytes"]  # others write to the disk meanwhile
    assert answer["temp_dir"] == here


def test_bad_usage_is_an_answer_not_a_traceback() -> None:
    source = sent_source("toolkit.node", "startdiag.py")
    done = subprocess.run(
        [sys.executable, "-", "only-one"], input=source, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert json.loads(done.stdout) == {
        "error": "usage: startdiag TEMP_DIR PORTS [HEAD_IP HEAD_PORTS]"
    }
