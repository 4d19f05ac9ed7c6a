"""One line per cause, from a node's facts and Ray's own output (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from toolkit.inventory.models import PortSettings
from toolkit.lifecycle.failures.causes import (
    MIN_TEMP_FREE_BYTES,
    explain_start_failure,
    port_names,
    size_text,
    start_blocker,
)
from toolkit.nodeinfo.start_facts import RayFacts, StartDiagFacts, TempDirFacts

NAMES = port_names(PortSettings())
TEMP = TempDirFacts("/tmp/rtk-c", True, "/", "ext4", False, 50 << 30)
RAY = RayFacts("/opt/venv/bin/python", "2.60.0")
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.11/site-packages/ray/_private/utils.py", line 95, in w\n'
    '    with open(address_file, "w+") as f:\n'
    "         ^^^^^^^^^^^^^^^^^^^^^^^^^\n"
)


def facts(**changes: object) -> StartDiagFacts:
    base = StartDiagFacts("node2", "node2", TEMP, RAY)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def explain(output: str, diag: StartDiagFacts | None, exit_code: int | None = 1) -> str:
    return explain_start_failure(
        "ray start", exit_code, output, diag, NAMES, "node1", "2.60.0"
    ).cause


def test_port_names_come_from_the_inventory_section() -> None:
    assert NAMES[6379] == "gcs" and NAMES[6380] == "node_manager"


@pytest.mark.parametrize(
    ("temp", "words"),
    [
        (dataclasses.replace(TEMP, free_bytes=64 << 10), "has 64 KiB free (ext4 at /)"),
        (dataclasses.replace(TEMP, read_only=True), "read-only file system (ext4 at /)"),
        (
            dataclasses.replace(TEMP, write_error="OSError: [Errno 30] Read-only file system"),
            "read-only file system",
        ),
        (dataclasses.replace(TEMP, write_error="PermissionError: denied"), "cannot be written"),
        (dataclasses.replace(TEMP, other_hosts=("node1",)), "is shared with node1 (ext4 at /)"),
        (dataclasses.replace(TEMP, fs_type="nfs4", mount_point="/home"), "on nfs4 (/home)"),
        (dataclasses.replace(TEMP, fs_type="fuse.sshfs"), "network file system"),
    ],
)
def test_a_temp_dir_ray_cannot_use_blocks_the_start(temp: TempDirFacts, words: str) -> None:
    problem = start_blocker(temp, RAY)
    assert problem is not None and words in problem
    assert "ray.temp_dir" in problem


def test_a_good_node_is_not_blocked() -> None:
    assert start_blocker(TEMP, RAY, "node1", "2.60.0") is None
    assert start_blocker(dataclasses.replace(TEMP, free_bytes=MIN_TEMP_FREE_BYTES), RAY) is None
    # A container node's Ray is the container's: the host's Python is not asked.
    assert start_blocker(TEMP, None, "node1", "2.60.0") is None


def test_a_python_without_ray_or_with_another_version_blocks_the_start() -> None:
    none = RayFacts("/usr/bin/python3", None, "No module named 'ray'")
    assert start_blocker(TEMP, none, "node1", "2.60.0") == (
        "its Python /usr/bin/python3 has no Ray (No module named 'ray'): install "
        "ray[default]==2.60.0 there, or set python: in the inventory to one that has it"
    )
    other = RayFacts("/opt/old/bin/python", "2.59.0")
    assert start_blocker(TEMP, other, "node1", "2.60.0") == (
        "Ray 2.59.0 here, 2.60.0 on the head node1: every node needs the same Ray; "
        "install ray[default]==2.60.0 in /opt/old/bin/python"
    )
    assert start_blocker(TEMP, other, "node1", None) is None  # the head itself


def test_a_full_temp_dir_after_the_start_names_the_space() -> None:
    output = TRACEBACK + "OSError: [Errno 28] No space left on device"
    full = facts(temp_dir=dataclasses.replace(TEMP, free_bytes=0))
    assert explain(output, full).startswith("Ray's temp dir /tmp/rtk-c has 0 B free (ext4 at /)")
    # Without the node's word, Ray's own line still says it.
    assert explain(output, None).startswith(
        "no space left for Ray (OSError: [Errno 28] No space left on device)"
    )


def test_a_taken_port_names_its_holder() -> None:
    output = "ValueError: Failed to bind to port 6380: Address already in use"
    held = facts(port_holders={6380: "nc (pid 4242)"})
    assert explain(output, held) == (
        "port(s) taken: 6380 (node_manager) by nc (pid 4242); stop it, or choose other "
        "ports in the inventory's ports: section"
    )
    assert explain(output, facts()).startswith("a port 6380 Ray binds is taken")


def test_an_unreachable_head_port_is_named_with_what_was_reached() -> None:
    cut = facts(reach={6379: "timed out", 6380: None, 6381: None})
    assert explain("node2: command ran past its 120 s limit", cut, None) == (
        "cannot reach the head node1 on port 6379 (gcs): timed out, though it reaches 2 "
        "other ports of it: a firewall between the nodes? open these ports to the other "
        "nodes, or choose others in the inventory's ports: section"
    )
    refused = facts(reach={6379: "Connection refused", 6381: "Connection refused"})
    assert explain("", refused, None).startswith(
        "cannot reach the head node1 on ports 6379 (gcs): Connection refused, 6381 "
        "(object_manager): Connection refused: a firewall"
    )


def test_a_version_mismatch_in_rays_words() -> None:
    output = "RuntimeError: Version mismatch: The cluster was started with Ray 2.60.0"
    assert explain(output, None).startswith("Ray's version differs from the head's (RuntimeError")


def test_no_ray_in_the_output_without_facts() -> None:
    output = "/usr/bin/python3: No module named ray"
    assert explain(output, None).startswith("its Python has no Ray")
    # With facts, the node's Python is named.
    assert "/usr/bin/python3" in explain(output, facts(ray=RayFacts("/usr/bin/python3")))


def test_rays_timeout_text_gives_way_to_the_logs_error_line() -> None:
    output = (
        TRACEBACK + "Exception: The current node timed out during startup. This could happen "
        "because some of the raylet failed to startup or the GCS has become overloaded."
    )
    logged = facts(log_errors=("raylet.out: [2026 E 1 1] Check failed: dir_ok",))
    assert explain(output, logged) == (
        "ray start exited 1; Ray's log says: raylet.out: [2026 E 1 1] Check failed: dir_ok"
    )


def test_the_fallback_is_the_last_line_that_says_something() -> None:
    output = TRACEBACK + "RuntimeError: something new\n"
    failure = explain_start_failure("ray start", 1, output, facts(), NAMES, "node1")
    assert failure.cause == "ray start exited 1: RuntimeError: something new"
    assert failure.detail == output.rstrip()
    assert (
        explain("", facts(), 3) == "ray start exited 3 without a word; --verbose shows its output"
    )
    assert explain("", facts(), None) == "ray start did not join the head in time"


def test_a_container_nodes_host_python_is_not_blamed() -> None:
    no_ray = facts(ray=RayFacts("/usr/bin/python3", None, "No module named 'ray'"))
    failure = explain_start_failure(
        "container start", 1, "rtk: Ray did not start", no_ray, NAMES, "node1", host_ray=False
    )
    assert failure.cause == "container start exited 1: rtk: Ray did not start"


def test_sizes_read_as_people_write_them() -> None:
    assert [size_text(n) for n in (0, 64 << 10, 256 << 20, 3 << 29, 5 << 40)] == [
        "0 B",
        "64 KiB",
        "256 MiB",
        "1.5 GiB",
        "5.0 TiB",
    ]
