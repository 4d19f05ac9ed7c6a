"""Results come from the head in pieces, never held in memory, and a cut copy resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.cluster.plan import build_plan
from toolkit.inventory import default_inventory
from toolkit.telemetry.fetch import fetch_run
from toolkit.telemetry.report import build_report, summary_dict
from toolkit.transport.local import LocalTransport


def test_a_run_on_the_head_is_packed_copied_and_unpacked_here(tmp_path: Path) -> None:
    # This machine is the head (local transport): the head's run is in one folder,
    # "here" is another, and the archive on the head is removed afterwards.
    fixture = build_run(tmp_path / "head", RunSpec(nodes=[NodeSpec("node1", gpus=2)]))
    (fixture.run_dir / "train").mkdir()
    (fixture.run_dir / "train" / "checkpoint.pt").write_bytes(b"x" * 1000)
    plan = build_plan(default_inventory())
    here = tmp_path / "here"
    copied = fetch_run(plan, LocalTransport(), str(fixture.run_dir), here)
    assert "telemetry/manifest.json" in copied
    assert "telemetry/nodes/node1/trace-001.arrows" in copied
    assert not (here / "train").exists()  # checkpoints never come back
    for name in copied:
        assert (here / name).read_bytes() == (fixture.run_dir / name).read_bytes(), name
    assert not list(Path(plan.paths.temp_dir).glob("rtk-pack-*"))
    assert not list(here.glob(".rtk-pack-*"))
    built = {d: summary_dict(build_report(d)) for d in (fixture.run_dir, here)}
    for summary in built.values():
        summary.pop("run_dir")
    assert built[fixture.run_dir] == built[here]


def test_an_interrupted_copy_resumes_where_it_stopped(tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    data = bytes(range(256)) * 40_000  # 10 MB
    source.write_bytes(data)
    local = tmp_path / "copy" / "big.bin"
    local.parent.mkdir()
    partial = local.with_name("big.bin.part")
    partial.write_bytes(data[:3_000_000])  # what an interrupted copy left
    node = default_inventory().nodes[0]
    assert LocalTransport().get(node, str(source), local) == len(data)
    assert local.read_bytes() == data and not partial.exists()
    # A leftover longer than the file is not this file's: the copy starts over.
    partial.write_bytes(b"y" * (len(data) + 10))
    assert LocalTransport().get(node, str(source), local) == len(data)
    assert local.read_bytes() == data


def test_a_missing_file_is_a_transport_error(tmp_path: Path) -> None:
    from toolkit.errors import TransportError

    node = default_inventory().nodes[0]
    with pytest.raises(TransportError, match="cannot copy"):
        LocalTransport().get(node, str(tmp_path / "nope"), tmp_path / "out")


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/escape.txt", "link"])
def test_an_archive_reaching_outside_the_run_is_refused(tmp_path: Path, name: str) -> None:
    import io
    import tarfile

    from toolkit.telemetry.fetch import unpack

    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo(name)
        if name == "link":
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(member)
        else:
            member.size = 3
            tar.addfile(member, io.BytesIO(b"bad"))
    dest = tmp_path / "dest"
    with pytest.raises(ValueError, match="refusing"):
        unpack(archive, dest)
    assert not (tmp_path / "escape.txt").exists() and not (dest / "link").exists()


def test_a_pack_answer_without_file_names_is_refused_naming_the_head(tmp_path: Path) -> None:
    from scripted_transport import ScriptedTransport

    from toolkit.errors import ClusterError

    plan = build_plan(default_inventory())
    transport = ScriptedTransport().on("*", " pack ", {"files": ["metrics.json", 3]})
    with pytest.raises(ClusterError, match=rf"^{plan.head.node.name}: malformed pack answer"):
        fetch_run(plan, transport, "/runs/r1", tmp_path / "here")
    assert transport.commands(pattern=" pack ") and not transport.commands(pattern="^rm ")
    assert not (tmp_path / "here").exists()  # refused as it arrived: nothing copied
