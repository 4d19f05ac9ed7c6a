"""The run directory (toolkit/rundir): its layout, its records, its pack list."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

import toolkit.rundir
from toolkit.errors import RunDirError
from toolkit.rundir import (
    Check,
    CommandRecord,
    IdleBaseline,
    IdleCooldown,
    IdleRecord,
    Manifest,
    Marker,
    MarkerWriter,
    MetricsLine,
    NodeManifest,
    PreflightRecord,
    ProfileRunRecord,
    RunDir,
    TrainConfigRecord,
    read_markers,
    read_metrics,
)
from toolkit.rundir.devices import GpuInfo, HostInfo, PowerModel, RaplDomain
from toolkit.rundir.gpu_settings import GpuApplied, NodeGpuSettings
from toolkit.rundir.record_base import Record
from toolkit.rundir.telemetry import ClockEntry, ClockOffset, SamplerStop, SamplerSummary

BASELINE = IdleBaseline(10.0, 250.5, 41.0, {"n1": 120.0, "n2": None})
COOLDOWN = IdleCooldown(12.5, True, 260.0, 45.0, 250.5, 120.0)
NODE = NodeManifest(
    name="n2",
    hostname="n2.example",
    offset_s=0.25,
    uncertainty_s=0.001,
    status="complete",
    devices={
        "host": HostInfo(
            power_source="model",
            energy_source="rapl",
            power_source_reason="no IPMI",
            rapl_domains=(RaplDomain("intel-rapl:0", "package", "package-0"),),
            cpus=2,
            model=PowerModel(2.0, 8.0, "an estimate"),
        ),
        "GPU-1": GpuInfo(name="H100", nvml_index=0, mig_devices=("MIG-1",), unsupported=()),
    },
    samples_expected=600,
    error=None,
    node_id="abc123",
    pid=4242,
    sensors=("host", "nvml"),
    clock=ClockEntry(0.25, 0.001, ClockOffset(0.25, 0.001, 15, 0.0004), None),
    first_wall_s=1_795_250_000.0,
    last_wall_s=1_795_250_060.0,
    sampler=SamplerSummary(
        600, 1_795_250_000.0, 1_795_250_060.0, SamplerStop(6000, 2, 60, 0, None), ("cut",)
    ),
)
HEAD = NodeManifest(
    "n1",
    "n1.example",
    0.0,
    0.0,
    "lost",
    {},
    10,
    "sampler died",
    sampler=SamplerSummary(10, 1.0, 2.0),
)

RECORDS: list[Record] = [
    CommandRecord(("python", "-c", "print(1)"), 0, 1.5),
    BASELINE,
    COOLDOWN,
    IdleRecord(BASELINE, COOLDOWN),
    IdleRecord(None, COOLDOWN),
    IdleRecord(),
    ProfileRunRecord(
        run_id="batch_size=8#1",
        config_id="batch_size=8",
        axes={"batch_size": 8, "power_limit_w": 300},
        repeat=1,
        status="succeeded",
        error=None,
        run_dir="sweep/runs/batch_size=8_1",
        started_wall_s=1.0,
        ended_wall_s=2.0,
        baseline=BASELINE,
        cooldown=COOLDOWN,
        gpu_settings={
            "n1": NodeGpuSettings(
                "n1",
                "rtk-temp/rtk/gpu-restore.json",
                {"GPU-1": GpuApplied(0, 300.0, 700.0, (1200, 1400), (1593, 1593))},
                ("persistence mode is off on GPU 0",),
            )
        },
    ),
    ProfileRunRecord("r#0", "r", {}, 0, "failed", error="job FAILED"),
    Check("host.dev_shm", "n1", "warn", "64 MiB", "1 GiB", "mount a bigger /dev/shm"),
    PreflightRecord(
        "mycluster",
        "fail",
        1.234,
        (Check("software.ray", "n1", "pass", "2.49"), Check("net.ping", "n1->n2", "fail", "-")),
    ),
    MetricsLine(3, 2.5, 0.2, 4096, 20480.0, 3e-3, 1_795_250_000.0),
    MetricsLine(4, 2.4, 0.2, 4096, 20480.0, 3e-3, 1_795_250_000.2, mfu=0.41),
    TrainConfigRecord({"run_dir": "runs/x", "max_steps": 10}, {"num_workers": 2}),
    Manifest("n1", 10.0, 50.0, {"n1": HEAD, "n2": NODE}, "runs/x", 1.0, None),
    Marker("step_end", 7, 1.5, 2.5, "n1", "n1.example", 0, 0, 2, None, 99, {"tokens": 8}),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_json(record: Record, tmp_path: Path) -> None:
    as_json = json.loads(json.dumps(record.to_json()))
    assert type(record).from_json(as_json, "x") == record
    path = tmp_path / "record.json"
    record.write(path)
    assert type(record).read(path) == record
    assert not list(tmp_path.glob(".*.tmp"))  # written at once, no temp file left


@pytest.mark.parametrize(
    ("record_type", "text", "wrong"),
    [
        (CommandRecord, '{"command": ["x"], "exit_code": "0", "duration_s": 1}', "exit_code"),
        (IdleRecord, '{"baseline": {"power_w": "hot"}}', "baseline: power_w"),
        (IdleRecord, '{"cooldown": {"settled": "yes"}}', "cooldown: settled"),
        (ProfileRunRecord, '{"v": 1, "run_id": "a", "config_id": "a", "status": "x"}', "axes"),
        (ProfileRunRecord, '{"v": 2, "run_id": "a"}', "v: expected version 1"),
        (
            ProfileRunRecord,
            '{"run_id": "a", "config_id": "a", "axes": {}, "status": "x", "gpu_settings":'
            ' {"n1": {"node": "n1", "restore_file": "f", "gpus": {"G": {"index": 0,'
            ' "gpu_clocks_mhz": [1200]}}}}}',
            "gpu_settings: n1: gpus: G: gpu_clocks_mhz: expected [MIN, MAX] in MHz, got [1200]",
        ),
        (
            ProfileRunRecord,
            '{"run_id": "a", "config_id": "a", "axes": {}, "status": "x", "gpu_settings":'
            ' {"n1": {"node": "n1", "gpus": {}}}}',
            "gpu_settings: n1: restore_file: expected text, got None",
        ),
        (
            PreflightRecord,
            '{"cluster": "c", "status": "ok", "duration_s": 1, "checks": []}',
            "status: expected pass or warn or fail, got 'ok'",
        ),
        (
            PreflightRecord,
            '{"cluster": "c", "status": "pass", "duration_s": 1, "checks": [{"name": 1}]}',
            "checks[0]: name",
        ),
        (TrainConfigRecord, '{"max_steps": 1}', "layout"),
        (Manifest, '{"head": "n1"}', "not a telemetry manifest"),
        (CommandRecord, '{"command": ["x"], ', "unreadable"),
        (CommandRecord, "[1, 2]", "expected a JSON object"),
    ],
)
def test_a_malformed_record_names_its_file_and_what_is_wrong(
    tmp_path: Path, record_type: type[Record], text: str, wrong: str
) -> None:
    path = tmp_path / "some.json"
    path.write_text(text)
    with pytest.raises(RunDirError) as caught:
        record_type.read(path)
    assert str(path) in str(caught.value)
    assert wrong in str(caught.value)


def test_a_missing_record_is_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match=r"idle\.json: unreadable"):
        IdleRecord.read(RunDir(tmp_path).idle)


def test_the_layout_names_every_file_of_a_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    relative = {
        "train_config": "train_config.json",
        "preflight": "preflight.json",
        "idle": "idle.json",
        "command": "command.json",
        "profile_run": "profile_run.json",
        "metrics": "metrics.jsonl",
        "superseded_metrics": "metrics.superseded.jsonl",
        "markers_dir": "markers",
        "telemetry_dir": "telemetry",
        "manifest": "telemetry/manifest.json",
        "nodes_dir": "telemetry/nodes",
        "report_dir": "report",
        "report_summary": "report/summary.json",
        "report_traces": "report/traces.csv",
        "report_html": "report/report.html",
        "report_plots_dir": "report/plots",
        "checkpoints_dir": "train",
    }
    for name, path in relative.items():
        assert getattr(run, name) == tmp_path / path, name
    assert run.marker(3) == tmp_path / "markers" / "rank-00003.jsonl"
    assert run.node_dir("n1") == tmp_path / "telemetry" / "nodes" / "n1"
    assert run.node_traces("n1") == []
    assert RunDir("~/runs/x").root == Path.home() / "runs" / "x"


def test_a_run_is_found_from_its_report_directory(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    assert RunDir.find(run.report_dir).root == run.report_dir  # no run there: as given
    run.manifest.parent.mkdir(parents=True)
    run.manifest.write_text("{}")
    run.report_plots_dir.mkdir(parents=True)
    assert RunDir.find(run.report_dir) == run
    assert RunDir.find(run.report_plots_dir) == run
    assert RunDir.find(run.root) == run
    assert RunDir.find(tmp_path) == RunDir(tmp_path)


def test_marker_files_pack_patterns_and_checkpoints(tmp_path: Path) -> None:
    """What the pack patterns take: telemetry, markers, metrics and records, no checkpoint."""
    run = RunDir(tmp_path)
    for path in (
        run.manifest,
        run.node_dir("n1") / "trace-001.arrows",
        run.marker(1),
        run.marker(0),
        run.metrics,
        run.superseded_metrics,
        run.idle,
        run.report_summary,
        run.checkpoints_dir / "checkpoint_000001" / "model.pt",
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    assert run.marker_files() == [run.marker(0), run.marker(1)]
    # What the driver copies from each rank's node to the head (telemetry.rank_files).
    assert run.rank_files() == [run.marker(0), run.marker(1), run.metrics, run.superseded_metrics]
    packed = {p for pattern in run.pack_patterns for p in tmp_path.glob(pattern) if p.is_file()}
    assert packed == {
        run.manifest,
        run.node_dir("n1") / "trace-001.arrows",
        run.marker(0),
        run.marker(1),
        run.metrics,
        run.superseded_metrics,
        run.idle,
    }


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_rundir_is_a_low_layer() -> None:
    """It imports the stdlib, pyarrow, toolkit's errors, fields, json_types, wallclock, itself."""
    package = Path(toolkit.rundir.__file__).parent
    for path in sorted(package.glob("*.py")):
        for name in _imports(path):
            if name.startswith("toolkit"):
                low = name in {
                    "toolkit.errors",
                    "toolkit.fields",
                    "toolkit.json_types",
                    "toolkit.wallclock",
                }
                assert low or name.startswith("toolkit.rundir"), (path, name)
            else:
                assert name.split(".")[0] not in {"pydantic", "ray", "torch", "numpy"}, (
                    path,
                    name,
                )


def test_markers_written_are_markers_read(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("RTK_NODE", "node7")
    writer = MarkerWriter(tmp_path, rank=2, local_rank=0, world_size=4, gpu_uuid="GPU-x")
    written = [writer.write("run_start", 0, resumed=False), writer.write("step_end", 1, loss=2.0)]
    writer.close()
    with RunDir(tmp_path).marker(2).open("a") as torn:
        torn.write('{"event": "step_beg')  # a crash mid-line
    records = read_markers(tmp_path)
    assert records == written
    marker = records[1]
    assert (marker.event, marker.step, marker.node, marker.rank) == ("step_end", 1, "node7", 2)
    assert marker.fields == {"loss": 2.0}
    line = json.loads(RunDir(tmp_path).marker(2).read_text().splitlines()[1])
    assert marker.to_json() == line
    assert set(line) == {"v", "event", "step", "wall_s", "mono_s", "node", "hostname", "rank"} | {
        "local_rank",
        "world_size",
        "gpu_uuid",
        "pid",
        "loss",
    }
    with pytest.raises(RunDirError, match="rank"):
        Marker.from_json({**records[0].to_json(), "rank": "two"})
    with RunDir(tmp_path).marker(3).open("w") as other:
        other.write(json.dumps({**records[0].to_json(), "rank": "two"}) + "\n")
    with pytest.raises(RunDirError, match="rank-00003.jsonl:1: rank"):
        read_markers(tmp_path)


def test_metrics_lines_are_read_with_bad_lines_named(tmp_path: Path) -> None:
    path = RunDir(tmp_path).metrics
    good = MetricsLine(1, 2.5, 0.2, 4096, 20480.0, 3e-3, 1.0)
    path.write_text(good.to_line() + '{"step": 2}\n{"step": 3, "lo')
    lines = list(read_metrics(path))
    assert lines[0] == good
    assert isinstance(lines[1], RunDirError) and f"{path}:2: loss" in str(lines[1])
    assert isinstance(lines[2], RunDirError) and f"{path}:3: not JSON" in str(lines[2])


def test_a_partial_manifest_is_read_with_what_was_assumed() -> None:
    manifest = Manifest.from_json(
        {
            "rate_hz": "fast",
            "nodes": {"n1": {}, "n2": {"clock": {"start": None, "end": None, "offset_s": 0}}},
        }
    )
    assert manifest.head == "n1" and manifest.rate_hz == 1.0
    assert manifest.nodes["n2"].offset_s == 0.0 and manifest.nodes["n2"].hostname == "n2"
    assert manifest.notes == [
        "manifest has no valid rate_hz ('fast'); 1 Hz assumed",
        "node n2: its clock offset was never measured; 0 s assumed",
    ]


@pytest.mark.parametrize("name", ["../../outside", "a/b", "..", ".", "", "x" * 300, "n\n1"])
def test_a_manifest_node_that_is_no_directory_name_is_refused(name: str) -> None:
    # Found by the property tests: 300 characters made the report's directory lookup
    # raise OSError (file name too long); ../.. read traces from outside the run.
    with pytest.raises(RunDirError) as caught:
        Manifest.from_json({"rate_hz": 10, "nodes": {"n1": {}, name: {}}})
    assert str(caught.value) == (
        f"telemetry/manifest.json: nodes: {name!r} is not a node's name (each names its "
        "directory under telemetry/nodes/)"
    )
