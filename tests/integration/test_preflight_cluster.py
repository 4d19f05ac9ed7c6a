"""``rtk preflight`` on a 6-node sandbox: a healthy cluster passes with a summary that
fits a screen, each fault is caught by name on the right node (a slowed link and a
CPU-starved node localised among their peers), every fault is undone after its test,
and the last test goes on without the bad node (``rtk up --exclude-file``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RAY_TEST_CLOCKS, failure_text, require, require_sandbox_host, rtk

from toolkit.sandbox import Sandbox, cpu_share, procs

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, ray_available: None) -> Iterator[Sandbox]:
    from toolkit.sandbox import create, destroy

    require_sandbox_host()
    destroy("sbpf")
    sandbox = create(6, name="sbpf", subnet="10.77.9", ray_env=RAY_TEST_CLOCKS)
    env = {"RTK_STATE_DIR": str(tmp_path_factory.mktemp("pf-state"))}
    sandbox.env = env  # type: ignore[attr-defined]
    try:
        up = rtk("up", str(sandbox.inventory_path), env=env)
        assert up.returncode == 0, up.stderr
        yield sandbox
        rtk("down", str(sandbox.inventory_path), env=env)
    finally:
        sandbox.destroy()


def preflight(sandbox: Sandbox, *args: str) -> tuple[int, dict[str, Any]]:
    done = rtk("preflight", str(sandbox.inventory_path), "--json", *args, env=sandbox.env)  # type: ignore[attr-defined]
    return done.returncode, json.loads(done.stdout)


def failures(result: dict[str, Any]) -> set[tuple[str, str]]:
    return {(c["name"], c["scope"]) for c in result["checks"] if c["status"] == "fail"}


def test_a_healthy_cluster_passes_with_its_bandwidth_and_an_all_reduce(cluster: Sandbox) -> None:
    # Small sizes: the sweep's default sizes are the unit tests' business; here the
    # question is whether every node takes part.
    code, result = preflight(cluster, "--bandwidth", "--allreduce-sizes", "1M,4M")
    assert code == 0, result
    assert failures(result) == set()
    assert result["exclude"] == [] and result["links"] == []
    names = [n.name for n in cluster.nodes]
    # Every pair tried (6 nodes: all pairs), graded per node and port: each reached
    # from its 5 peers.
    ports = {
        (c["name"], c["scope"]): c["measured"]
        for c in result["checks"]
        if c["name"].startswith("net.port.")
    }
    head_ports = ("gcs", "dashboard", "client_server")
    assert set(ports) == {
        (f"net.port.{p}", n) for n in names for p in ("node_manager", "object_manager")
    } | {(f"net.port.{p}", names[0]) for p in head_ports}
    assert set(ports.values()) == {"reached from 5 of 5 peers"}
    assert result["reach"]["mode"] == "all" and result["reach"]["pairs"] == 6 * 5
    assert result["reach"]["failures"] == []
    assert {c["name"] for c in result["checks"]} >= {
        "connect.node",
        "host.dev_shm",
        "host.hostname",
        "host.disk_free",
        "host.ephemeral_ports",
        "host.clock_offset",
        "software.ray",
        "software.python",
    }
    # On the terminal: a summary that fits a screen, not a line per pair and port.
    shown = rtk("preflight", str(cluster.inventory_path), env=cluster.env)  # type: ignore[attr-defined]
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert 3 <= len(lines) <= 24 and max(len(line) for line in lines) <= 100, shown.stdout
    assert len(result["checks"]) > 6 * 8  # per node, and per node and port
    verbose = rtk("preflight", str(cluster.inventory_path), "--verbose", env=cluster.env)  # type: ignore[attr-defined]
    passed = [c for c in result["checks"] if c["status"] == "pass"]
    assert len(verbose.stdout.splitlines()) > len(passed)  # a line each, and the warnings
    # --bandwidth: every node's link to the next measured, and a gloo all-reduce of all.
    tcp = {c["scope"]: c for c in result["checks"] if c["name"] == "net.bandwidth.tcp"}
    assert set(tcp) == {f"{a}->{b}" for a, b in zip(names, names[1:] + names[:1], strict=True)}
    reduce = next(c for c in result["checks"] if c["name"] == "net.bandwidth.allreduce")
    assert reduce["status"] == "pass"
    assert reduce["measured"].startswith("busbw ") and "(gloo, 6 ranks)" in reduce["measured"]


def test_a_host_name_resolving_to_loopback_is_caught_on_its_node(cluster: Sandbox) -> None:
    node = cluster.nodes[1].name
    hosts = cluster.hosts_file(node)  # the node sees it, read-only, as /etc/hosts
    before = hosts.read_text()
    hosts.write_text(f"127.0.1.1\t{node}\n" + before)  # the Debian installer's line, first
    try:
        code, result = preflight(cluster)
    finally:
        hosts.write_text(before)
    assert code == 1
    assert failures(result) == {("host.hostname", node)}
    assert preflight(cluster)[0] == 0  # undone


def test_a_tiny_dev_shm_is_caught_on_its_node(cluster: Sandbox) -> None:
    node = cluster.nodes[2].name
    cluster.run_in(node, ["mount", "-o", "remount,size=16m", "/dev/shm"])
    try:
        code, result = preflight(cluster)
        # rtk up runs the same checks after bring-up: it exits 1, the cluster left up.
        again = rtk("up", str(cluster.inventory_path), env=cluster.env)  # type: ignore[attr-defined]
        skipped = rtk("up", str(cluster.inventory_path), "--no-preflight", env=cluster.env)  # type: ignore[attr-defined]
    finally:
        cluster.run_in(node, ["mount", "-o", "remount,size=50%", "/dev/shm"])
    assert code == 1
    assert failures(result) == {("host.dev_shm", node)}
    shm = next(c for c in result["checks"] if c["name"] == "host.dev_shm" and c["scope"] == node)
    assert shm["measured"] == "16 MiB"
    assert again.returncode == 1
    assert re.search(rf"FAIL +host\.dev_shm +{node} +16 MiB", again.stdout), again.stdout

    assert "is up, but preflight failed" in again.stderr
    assert "6/6 node(s) alive" in again.stdout
    assert skipped.returncode == 0, skipped.stderr
    assert "preflight of" not in skipped.stdout


def test_a_different_ray_on_one_node_is_caught_on_that_node(
    cluster: Sandbox, tmp_path: Path
) -> None:
    import importlib.metadata

    node = cluster.nodes[2].name
    real = Path(str(importlib.metadata.distribution("ray")._path)) / "METADATA"  # type: ignore[attr-defined]
    other = Path("/var/tmp") / f"rtk-test-METADATA-{tmp_path.name}"
    version = importlib.metadata.version("ray")
    other.write_text(real.read_text().replace(f"Version: {version}", "Version: 2.59.0", 1))
    # Inside that node's mount namespace only: its Python now reports Ray 2.59.0.
    bound = cluster.run_in(node, ["mount", "--bind", str(other), str(real)])
    assert bound.returncode == 0, bound.stderr
    try:
        code, result = preflight(cluster)
    finally:
        cluster.run_in(node, ["umount", str(real)])
        other.unlink()
    assert code == 1
    assert failures(result) == {("software.ray", node)}
    odd = next(c for c in result["checks"] if c["name"] == "software.ray" and c["scope"] == node)
    assert odd["measured"] == "2.59.0" and version in odd["threshold"]
    assert shutil.which("python3")  # the host's own Ray is untouched
    assert importlib.metadata.version("ray") == version


def test_a_firewalled_ray_port_is_caught_from_every_peer_of_that_node(cluster: Sandbox) -> None:
    require(shutil.which("iptables") is not None, "iptables (scripts/system-packages.sh)")
    node = cluster.nodes[1].name
    rule = ["INPUT", "-p", "tcp", "--dport", "6381", "-j", "DROP"]  # object manager
    added = cluster.run_in(node, ["iptables", "-A", *rule])
    assert added.returncode == 0, added.stderr
    try:
        code, result = preflight(cluster)
    finally:
        cluster.run_in(node, ["iptables", "-D", *rule])
    assert code == 1
    others = [n.name for n in cluster.nodes if n.name != node]
    # One failure, on that node: every one of its 5 peers timed out on the port.
    assert failures(result) == {("net.port.object_manager", node)}
    blocked = next(
        c for c in result["checks"] if c["scope"] == node and c["name"] == "net.port.object_manager"
    )
    assert blocked["measured"].startswith("object_manager port 6381 timed out")
    assert blocked["measured"].endswith("from 5 of 5 peers")
    # Every pair into it is in the JSON, per node and port.
    [entry] = result["reach"]["failures"]
    assert (entry["dst"], entry["port"], entry["tried"], entry["reached"]) == (
        node,
        "object_manager",
        5,
        0,
    )
    assert sorted(entry["sources"]) == sorted(others)
    # Every pair into that node failed, so the node is the one to go on without.
    assert [e["node"] for e in result["exclude"]] == [node], result["exclude"]
    assert result["links"] == []
    assert preflight(cluster)[0] == 0  # undone


# The starved node's GEMM shares its CPU share (a cgroup weight, as its peers have)
# with two busy processes: a third of its peers' figure whatever else loads the
# machine, against the 50%-of-median line (18-24% measured).
def test_a_cpu_starved_node_is_named_by_the_load_test(cluster: Sandbox, tmp_path: Path) -> None:
    require(cpu_share.available(), "a writable cpu cgroup controller for the sandbox's nodes")
    node = cluster.layout.nodes[3]
    group = cpu_share.group_path(node)
    assert group is not None
    # Two busy processes inside the node, in its CPU share, competing with its work.
    hog = ["python3", "-c", "while True: pass"]
    init_pid = cluster.node(node.name).init_pid
    # Entered with nsenter, and first moved into the node's CPU share as its init was.
    argv = cpu_share.wrap(procs.nsenter_argv(init_pid, hog), node)
    hogs = [subprocess.Popen(argv) for _ in range(2)]

    def stop_hogs() -> None:
        for p in hogs:
            p.kill()
            p.wait()
        # nsenter forked the busy process inside the node: killing nsenter left it.
        cluster.run_in(node.name, ["pkill", "-f", "while True: pass"])

    # They starve the node while every node's GEMM runs, and go once the last GEMM is
    # measured: the all-reduces after it, which the test does not grade, then run at
    # their usual pace, not at a starved node's (half a minute more).
    measuring = {f"rtk load: load test {n.name}:" for n in cluster.nodes}
    argv = [sys.executable, "-m", "toolkit", "preflight", str(cluster.inventory_path)]
    argv += ["--json", "--load", "--load-seconds", "3"]
    output = tmp_path / "preflight.json"
    try:
        with (
            output.open("w") as stdout,
            subprocess.Popen(
                argv,
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **cluster.env},  # type: ignore[attr-defined]
            ) as job,
        ):
            timer = threading.Timer(300, job.kill)  # what rtk()'s timeout did
            timer.start()
            assert job.stderr is not None
            for line in job.stderr:
                measuring = {m for m in measuring if not line.startswith(m)}
                if not measuring and hogs[0].poll() is None:
                    stop_hogs()
            code = job.wait()
            timer.cancel()
    finally:
        if hogs[0].poll() is None:
            stop_hogs()
    result = json.loads(output.read_text())
    assert cluster.run_in(node.name, ["pgrep", "-f", "while True: pass"]).returncode == 1
    assert code == 1, result
    # Named against its peers by its GEMM; on a shared host a peer's memory copies may
    # be noisy too, so only the GEMM must single it out.
    assert {scope for name, scope in failures(result) if name == "load.gemm"} == {node.name}
    gemm = {c["scope"]: c for c in result["checks"] if c["name"] == "load.gemm"}
    assert set(gemm) == {n.name for n in cluster.nodes}
    assert "of the median" in gemm[node.name]["measured"]
    intra = {c["scope"] for c in result["checks"] if c["name"] == "intra.allreduce"}
    assert intra == {n.name for n in cluster.nodes}  # each node's own gloo all-reduce ran
    assert node.name in [e["node"] for e in result["exclude"]]


def test_a_slowed_link_is_localised_and_the_cluster_goes_on_without_its_node(
    cluster: Sandbox, tmp_path: Path
) -> None:
    """Last in the module: it leaves the cluster up without the slowed node."""
    node = cluster.layout.nodes[1]  # traffic into node2 passes its veth's host end
    shape = ["root", "tbf", "rate", "500mbit", "burst", "256kb", "latency", "50ms"]
    added = subprocess.run(["tc", "qdisc", "add", "dev", node.veth, *shape], check=False)
    assert added.returncode == 0
    try:
        code, result = preflight(
            cluster, "--bandwidth", "--bandwidth-retries", "1", "--allreduce-sizes", "1M"
        )
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", node.veth, "root"], check=True)
    assert code == 1
    before = cluster.nodes[0].name
    assert failures(result) == {
        ("net.bandwidth.tcp", f"{before}->{node.name}"),
        ("net.localise.tcp", node.name),
    }
    slow = next(
        c
        for c in result["checks"]
        if c["name"] == "net.bandwidth.tcp" and c["scope"] == f"{before}->{node.name}"
    )
    assert float(slow["measured"].split()[0]) < 0.55  # the shaped 500 Mbit/s
    assert "(best of 2)" in slow["measured"]  # measured again before failing
    named = next(c for c in result["checks"] if c["name"] == "net.localise.tcp")
    assert named["measured"].startswith("slow in ") and "tests with it" in named["measured"]
    assert f"rtk up --exclude {node.name}" in named["hint"]
    assert [e["node"] for e in result["exclude"]] == [node.name]

    # Go on without it: the preflight's JSON is the exclude file.
    found = tmp_path / "preflight.json"
    found.write_text(json.dumps(result))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(cluster.inventory_path.read_text() + "min_nodes: 5\n")
    env = cluster.env  # type: ignore[attr-defined]
    assert rtk("down", str(inventory), env=env).returncode == 0
    up = rtk("up", str(inventory), "--exclude-file", str(found), "--json", env=env)
    assert up.returncode == 0, failure_text(up)
    status = rtk("status", str(inventory), "--json", env=env)
    alive = set(json.loads(status.stdout)["alive"])
    assert alive == {n.name for n in cluster.nodes} - {node.name}, status.stdout
    assert cluster.run_in(node.name, ["pgrep", "-f", "raylet"]).returncode == 1  # no Ray there
