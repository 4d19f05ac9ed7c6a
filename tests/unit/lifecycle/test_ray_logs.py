"""``rtk logs --ray``'s collection, run for real: the node script packs real files, the
local transport copies them, and a node whose Python is missing fails on its own.

The three nodes of the inventory are all this machine (the local transport runs every
node's commands here), so they share one cluster temp dir: each packs it in parallel.
"""

from __future__ import annotations

import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from toolkit.cli import TRANSPORT_FACTORY, main
from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.errors import ClusterError, RtkError
from toolkit.inventory import load_inventory
from toolkit.lifecycle.ray_logs import NodeLogs, collect_ray_logs, parse_duration_s
from toolkit.transport.local import LocalTransport

TOKEN = "0123456789abcdef0123456789abcdef"
SESSION = "session_2024-05-01_12-00-00_000001_42"


@pytest.fixture
def cluster_dir() -> Iterator[Path]:
    """A short temp dir (Ray's limit on socket paths), as a node of a live cluster has it."""
    root = Path(tempfile.mkdtemp(prefix="rtkl-"))
    (root / "rtk").mkdir()
    (root / "rtk" / "auth_token").write_text(TOKEN + "\n")
    (root / "rtk" / "node.env").write_text("RAY_AUTH_MODE=token\nRTK_NODE=n1\n")
    logs = root / SESSION / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text("raylet started\n")
    (logs / "job-driver-raysubmit_1.log").write_text(f"printed the token: {TOKEN}\n")
    (root / "session_latest").symlink_to(SESSION)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def inventory_file(where: Path, temp_dir: Path, broken: str = "n2") -> Path:
    nodes = [
        {"host": name, "address": f"10.9.0.{i}", "python": sys.executable}
        for i, name in enumerate(("n1", "n2", "n3"), start=1)
    ]
    for node in nodes:
        if node["host"] == broken:
            node["python"] = str(where / "no-such-python")
    data = {
        "cluster": "logtest",
        "ray": {"temp_dir": str(temp_dir), "auth": "none"},
        "fanout": {"parallel": 2},
        "nodes": nodes,
    }
    path = where / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def plan_for(where: Path, temp_dir: Path) -> ClusterPlan:
    return build_plan(load_inventory(inventory_file(where, temp_dir)))


def test_a_folder_per_node_without_the_token_and_the_failing_node_named(
    tmp_path: Path, cluster_dir: Path
) -> None:
    out = tmp_path / "bug"
    collection = collect_ray_logs(plan_for(tmp_path, cluster_dir), LocalTransport(), out)
    assert sorted(collection.nodes) == ["n1", "n3"]
    assert list(collection.errors) == ["n2"]
    assert "no-such-python not found on the node" in collection.errors["n2"]
    for node in ("n1", "n3"):
        assert (out / node / "ray" / SESSION / "raylet.out").read_text() == "raylet started\n"
        assert (out / node / "rtk" / "node.env").exists()
        assert (out / node / "COLLECTION.txt").exists()
        assert not (out / node / "rtk" / "auth_token").exists()
    assert not (out / "n2").exists()
    assert (out / "summary.json").exists()
    every_file = [p for p in out.rglob("*") if p.is_file()]
    assert all(TOKEN.encode() not in p.read_bytes() for p in every_file)
    driver = out / "n1" / "ray" / SESSION / "job-driver-raysubmit_1.log"
    assert driver.read_text() == f"printed the token: {'*' * len(TOKEN)}\n"
    # Nothing is left behind: no archive on the node, no staging folder here.
    assert not list(cluster_dir.glob("rtk-logs-*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bug", "inv.yaml"]
    assert collection.file_bytes == 2 * sum(
        n.file_bytes for n in collection.nodes.values() if n.node == "n1"
    )


def test_one_tarball_holds_a_folder_per_node(tmp_path: Path, cluster_dir: Path) -> None:
    out = tmp_path / "bug.tar.gz"
    collection = collect_ray_logs(plan_for(tmp_path, cluster_dir), LocalTransport(), out)
    assert collection.tarball and out.is_file()
    with tarfile.open(out, "r:gz") as tar:
        names = tar.getnames()
        contents = [tar.extractfile(m).read() for m in tar if m.isfile()]  # type: ignore[union-attr]
    assert f"n1/ray/{SESSION}/raylet.out" in names
    assert f"n3/ray/{SESSION}/raylet.out" in names
    assert "summary.json" in names
    assert not [n for n in names if n.startswith("n2/") or n.endswith("auth_token")]
    assert all(TOKEN.encode() not in data for data in contents)
    assert not out.with_name("bug.tar.gz.part").exists()


def test_an_existing_destination_is_refused_before_any_node_is_asked(
    tmp_path: Path, cluster_dir: Path
) -> None:
    out = tmp_path / "bug"
    out.mkdir()
    (out / "earlier.txt").write_text("x")
    with pytest.raises(RtkError, match="exists already"):
        collect_ray_logs(plan_for(tmp_path, cluster_dir), LocalTransport(), out)


def test_the_cli_prints_one_line_groups_the_failures_and_exits_4(
    tmp_path: Path,
    cluster_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    inventory = inventory_file(tmp_path, cluster_dir)
    out = tmp_path / "bug.tgz"
    monkeypatch.setattr(sys, "argv", ["rtk", "logs", str(inventory), "--ray", "--out", str(out)])
    with pytest.raises(SystemExit) as exited:
        main(obj={TRANSPORT_FACTORY: lambda inv: LocalTransport()})
    assert exited.value.code == 4  # a node failed; the others' logs are there
    printed = capsys.readouterr()
    assert len(printed.out.splitlines()) == 1
    assert re.fullmatch(
        rf"logs of 2 of 3 node\(s\), \d+ B, in {re.escape(str(out))} "
        r"\(a tarball, a folder per node\)\n",
        printed.out,
    )
    assert "rtk: not collected: 1 node(s), 1 cause(s)" in printed.err
    assert "n2: " in printed.err and "not found on the node" in printed.err
    assert "the others' are in" in printed.err


def test_durations_read_as_seconds() -> None:
    assert [parse_duration_s(t) for t in ("90", "90s", "30m", "2h", "1d", "1.5h")] == [
        90,
        90,
        1800,
        7200,
        86400,
        5400,
    ]
    for bad in ("", "2w", "-5m", "0", "h"):
        with pytest.raises(ValueError, match="give a duration like"):
            parse_duration_s(bad)


def test_a_malformed_answer_names_the_node_and_the_field() -> None:
    with pytest.raises(ClusterError, match=r"^n1: malformed log packer answer .* 'files'"):
        NodeLogs.from_answer("n1", {"files": "3", "file_bytes": 1})
