"""The flow layer and the CLI's promises: dry runs, --local, policies, telemetry options.

Fast: no Ray, no sandbox. The preflight policy tests run the real checks on this
machine over the local transport (under a second), against an inventory that asks
for more GPUs than any machine has, so a check fails everywhere.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from conftest import rtk
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.cli import cli
from toolkit.cli.output.run_report import render_collect, render_report
from toolkit.errors import PreflightError, RtkError
from toolkit.flows import (
    PreflightFailedError,
    PreflightPolicy,
    Session,
)
from toolkit.inventory import default_inventory, load_inventory
from toolkit.stall.settings import WatchSettings
from toolkit.telemetry.options import TelemetryOptions
from toolkit.train.config import TrainConfig

# Commands that start, stop or run something on the nodes.
NODE_CHANGING = {
    *("up", "down", "demo", "exec", "launch", "train", "telemetry record", "profile"),
    *("sbatch submit", "sandbox up", "sandbox down"),
}

UNFIT_INVENTORY = """\
cluster: flowtest
transport: local
nodes:
  - host: localhost
    address: 127.0.0.1
    gpus: 64
"""


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} ")
        else:
            yield path, command


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in p.opts}


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """rtk's state directory for this test; it must stay absent after a dry run."""
    path = tmp_path / "state"
    monkeypatch.setenv("RTK_STATE_DIR", str(path))
    monkeypatch.chdir(tmp_path)
    return path


def _rtk(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


# ---- the CLI keeps its promises ----------------------------------------------------------


def test_every_node_changing_command_takes_dry_run() -> None:
    commands = dict(_commands(cli))
    assert set(commands) >= NODE_CHANGING
    missing = [
        name for name in sorted(NODE_CHANGING) if "--dry-run" not in _options(commands[name])
    ]
    assert missing == []


def test_every_command_that_takes_an_inventory_takes_local() -> None:
    # rtk inventory validates the file itself; rtk sbatch writes a SLURM job, whose
    # nodes are the allocation's: neither has a "this machine alone" meaning.
    exempt = ("inventory ", "sbatch ")
    commands = dict(_commands(cli))
    taking = {
        name
        for name, command in commands.items()
        if any(p.name == "inventory" for p in command.params) and not name.startswith(exempt)
    }
    assert {"exec", "launch", "telemetry record", "train", "up", "preflight"} <= taking
    missing = sorted(name for name in taking if "--local" not in _options(commands[name]))
    assert missing == []


def test_preflight_says_output_dir_and_keeps_run_dir_hidden() -> None:
    help_text = _rtk("preflight", "--help").output
    assert "--output-dir" in help_text
    assert "--run-dir" not in help_text


@pytest.mark.parametrize("flag", ["--output-dir", "--run-dir"])
def test_preflight_output_dir_and_its_old_name_both_reach_the_disk_check(
    state: Path, tmp_path: Path, flag: str
) -> None:
    done = _rtk("preflight", "--local", flag, str(tmp_path), "--json")
    checks = json.loads(done.output)["checks"]
    disk = next(c for c in checks if c["name"] == "host.disk_free")
    assert disk["measured"].endswith(f"free at {tmp_path}")


# ---- dry runs print the plan and touch nothing ------------------------------------------


def test_train_dry_run_prints_preflight_job_and_report(state: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    done = _rtk(
        "train", "--local", "--dry-run", "--max-steps", "7", "--output-dir", str(out),
        "--run-id", "r1",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[0] == "cluster 'local': 1 node(s), head localhost"
    assert lines[1].startswith("1. preflight (enforce): ")
    assert f"saved as {out}/r1/preflight.json" in lines[1]
    assert re.match(r"2\. job: train job rtk-train-r1-\d+ via http://127\.0\.0\.1:8365$", lines[2])
    entrypoint = shlex.split(lines[3].split("entrypoint: ", 1)[1])
    assert entrypoint[1:3] == ["-m", "toolkit.train.job"]
    config = TrainConfig.from_json(json.loads(entrypoint[3]))
    assert (config.max_steps, config.run_dir) == (7, f"{out}/r1")
    assert f"4. report: {out}/r1/report" in lines
    assert not state.exists() and not out.exists()


def test_train_dry_run_without_preflight_or_telemetry(state: Path) -> None:
    done = _rtk("train", "--local", "--dry-run", "--no-preflight", "--no-telemetry")
    assert done.exit_code == 0, done.output
    assert "1. preflight: skipped" in done.output
    assert "report:" not in done.output
    assert not state.exists()


def test_exec_dry_run_local_shows_the_command_per_node(state: Path) -> None:
    done = _rtk("exec", "--local", "--dry-run", "--no-env", "--", "nvidia-smi", "-L")
    assert done.exit_code == 0, done.output
    assert done.output == (
        "cluster 'local': on 1 node(s) over local (localhost), at most 600 s each:\n"
        "  nvidia-smi -L\n"
    )
    with_env = _rtk("exec", "--local", "--dry-run", "--", "hostname").output
    assert "node.env" in with_env and with_env.rstrip().endswith("; hostname")
    assert not state.exists()


def test_exec_local_with_an_inventory_file_is_a_usage_error(state: Path, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(UNFIT_INVENTORY)
    done = _rtk("exec", str(inv), "--local", "--dry-run", "--", "hostname")
    assert done.exit_code == 2
    assert "not both" in done.output


def test_exec_without_a_command_is_a_usage_error() -> None:
    done = _rtk("exec", "--local")
    assert done.exit_code == 2
    assert "Missing argument 'COMMAND...'" in done.output


def test_launch_dry_run_ships_the_working_dir(state: Path, tmp_path: Path) -> None:
    done = _rtk("launch", "--local", "--dry-run", "--", "python", "my train.py", "--lr", "1e-4")
    assert done.exit_code == 0, done.output
    assert re.match(r"command job rtk-launch-local-\d+ via http://127\.0\.0\.1:8365\n", done.output)
    assert "  entrypoint: python 'my train.py' --lr 1e-4\n" in done.output
    assert f"  working_dir: {tmp_path}\n" in done.output
    assert not state.exists()


def test_telemetry_record_dry_run_carries_the_telemetry_options(
    state: Path, tmp_path: Path
) -> None:
    done = _rtk(
        "telemetry", "record", "--local", "--dry-run", "--sensors", "host",
        "--power-rate-hz", "20", "--energy-rate-hz", "0.5",
        "--output-dir", str(tmp_path / "o"), "--run-id", "t1",
        "--", "./bench.sh", "--fast",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    line = next(x for x in done.output.splitlines() if "entrypoint: " in x)
    argv = shlex.split(line.split("entrypoint: ", 1)[1])
    assert argv[1:3] == ["-m", "toolkit.telemetry.record_job"]
    data = json.loads(argv[3])
    assert data.pop("run_dir") == f"{tmp_path}/o/t1"
    assert WatchSettings.from_json(data.pop("stall")) == WatchSettings()  # --on-stall report
    assert TelemetryOptions.from_json(data) == TelemetryOptions(
        sensors="host", power_rate_hz=20, energy_rate_hz=0.5
    )
    assert argv[4:] == ["./bench.sh", "--fast"]
    assert "1. preflight: skipped" in done.output
    assert not state.exists() and not (tmp_path / "o").exists()


def test_a_relative_output_dir_is_taken_from_here_and_left_out_of_the_package(
    state: Path, tmp_path: Path
) -> None:
    """Run from the job's own directory (Ray's copy), a relative run dir would be lost."""
    done = _rtk(
        "telemetry", "record", "--local", "--dry-run", "--output-dir", "runs/here",
        "--run-id", "t1", "--", "./bench.sh",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert f'"run_dir": "{tmp_path}/runs/here/t1"' in done.output
    assert f"  working_dir: {tmp_path}\n  excludes: ['/runs/here', '/state']\n" in done.output
    train = _rtk("train", "--local", "--dry-run", "--output-dir", "o", "--run-id", "t2")
    assert f"run directory: {tmp_path}/o/t2\n" in train.output
    demo = _rtk("demo", "--dry-run", "--output-dir", "d")
    assert f'"run_dir": "{tmp_path}/d/demo-' in demo.output


def test_demo_dry_run_shows_bring_up_run_and_teardown(state: Path, tmp_path: Path) -> None:
    done = _rtk("demo", "--dry-run", "--output-dir", str(tmp_path / "runs"))
    assert done.exit_code == 0, done.output
    assert "cluster 'local'" in done.output
    assert (
        "3. preflight (enforce)" in done.output and "job: train job rtk-train-demo-" in done.output
    )
    assert done.output.endswith("down: stop Ray on every node, also when a step failed\n")
    steps = [
        line.split(" ", 1)[1].split(":")[0]
        for line in done.output.splitlines()
        if line[:2] in {f"{n}." for n in range(1, 10)}
    ]
    assert steps == [
        "up",
        "status",
        "preflight (enforce)",
        "smoke",
        "job",
        "collect",
        "report",
        "down",
    ]
    assert "saved as " in done.output and "/preflight.json" in done.output
    assert not state.exists() and not (tmp_path / "runs").exists()


def test_profile_dry_run_lists_the_runs_to_do(state: Path, tmp_path: Path) -> None:
    (tmp_path / "inv.yaml").write_text(UNFIT_INVENTORY)
    (tmp_path / "sweep.yaml").write_text(
        textwrap.dedent(
            """\
            name: tiny
            inventory: inv.yaml
            workload:
              train: {model_size: tiny, max_steps: 3}
            axes:
              batch_size: [4, 8]
              power_limit_w: [250]
            """
        )
    )
    done = _rtk("profile", str(tmp_path / "sweep.yaml"), "--dry-run", "--max-runs", "1")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert re.match(r"sweep 'tiny' in .*: 1 run\(s\) to do, 0 finished earlier", lines[0])
    assert lines[1] == "1. up: the cluster on 1 node(s) (localhost), no checks"
    assert lines[2] == (
        "2. run batch_size=4,power_limit_w=250#1: on 1 node(s); power_limit_w=250, "
        "put back after the run; its report after the job"
    )
    assert "train job rtk-train-batch_size=4" in lines[3]
    assert lines[-1] == "3. down: the cluster of 1 node(s), also when a run failed"
    assert not state.exists() and not (tmp_path / "profile-runs").exists()
    restore = _rtk("profile", str(tmp_path / "sweep.yaml"), "--restore", "--dry-run")
    assert restore.output == "rtk profile: would restore GPU settings on localhost\n"


# ---- telemetry options: declared once, checked before anything starts -------------------


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--local", "--dry-run", "--sensors", "nvm"),
        ("telemetry", "record", "--local", "--dry-run", "--sensors", "nvm", "--", "true"),
    ],
)
def test_a_sensor_typo_is_a_usage_error_naming_the_valid_sensors(
    state: Path, args: tuple[str, ...]
) -> None:
    done = _rtk(*args)
    assert done.exit_code == 2
    assert "Invalid value for '--sensors'" in done.output
    assert "'nvm'" in done.output and "host, nvml" in done.output


# ---- preflight policies, with real checks on this machine --------------------------------


@pytest.fixture
def unfit(state: Path, tmp_path: Path) -> Iterator[Session]:
    """A session on this machine whose inventory wants 64 GPUs: gpu.count fails."""
    path = tmp_path / "inv.yaml"
    path.write_text(UNFIT_INVENTORY)
    with Session(load_inventory(path)) as session:
        yield session


def test_enforce_raises_with_the_report_and_keeps_it(unfit: Session, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(PreflightFailedError) as caught:
        unfit.preflight(str(run_dir), PreflightPolicy.ENFORCE)
    assert isinstance(caught.value, PreflightError)
    report = caught.value.preflight.report
    assert report is not None and report.exit_code == 1
    assert any(c.name == "gpu.count" and c.status == "fail" for c in report.checks)
    assert json.loads((run_dir / "preflight.json").read_text())["status"] == "fail"


def test_record_goes_on_and_keeps_the_report(unfit: Session, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    outcome = unfit.preflight(str(run_dir), PreflightPolicy.RECORD)
    assert outcome.failed and outcome.saved_to == f"{run_dir}/preflight.json"
    assert json.loads((run_dir / "preflight.json").read_text())["status"] == "fail"


def test_skip_runs_no_check(unfit: Session, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    outcome = unfit.preflight(str(run_dir), PreflightPolicy.SKIP)
    assert outcome.report is None and not outcome.failed
    assert not run_dir.exists()


def test_collect_without_fetch_finds_nothing_here(unfit: Session, tmp_path: Path) -> None:
    collected = unfit.collect(str(tmp_path / "nowhere"), fetch=False)
    assert collected.path is None and collected.error is None
    reported = unfit.report(collected)
    assert reported.summary is None and reported.html is None


def test_a_sweep_with_a_bad_telemetry_option_stops_before_anything_starts(
    state: Path, tmp_path: Path
) -> None:
    # An SSH inventory that nothing answers: were the check late, bring-up would fail
    # on connecting (exit 4) instead of naming the option in the file (exit 3).
    (tmp_path / "inv.yaml").write_text(
        "cluster: far\nnodes:\n  - host: gpu01\n    address: 127.0.0.1\n"
        "defaults:\n  ssh: {port: 1, connect_timeout_s: 1}\n"
    )
    (tmp_path / "sweep.yaml").write_text(
        "name: bad\ninventory: inv.yaml\n"
        "workload:\n  train: {model_size: tiny, telemetry_sensors: nvm}\n"
        "axes:\n  batch_size: [4]\n"
    )
    done = rtk("profile", str(tmp_path / "sweep.yaml"), env={"RTK_STATE_DIR": str(state)})
    assert done.returncode == 3
    assert "sweep.yaml:5: axes: batch_size=4: --sensors 'nvm' is not valid" in done.stderr
    assert not (tmp_path / "profile-runs").exists() and not state.exists()


# ---- collect and report, on a recorded run directory --------------------------------------


def report_run(
    session: Session, run_dir: str, fetch: bool = True, report: bool = True
) -> Path | None:
    """The collect and report steps of a run, rendered as the CLI's events render them."""
    collected = session.collect(run_dir, fetch)
    render_collect(collected, fetch)
    if not report:
        return None
    return render_report(session.report(collected))


def test_a_run_seen_here_is_collected_in_place_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = build_run(tmp_path, RunSpec(nodes=[NodeSpec("node1", gpus=1)]))
    session = Session(default_inventory())
    collected = session.collect(str(run.run_dir))
    assert (collected.path, collected.copied, collected.error) == (run.run_dir, None, None)
    reported = session.report(collected)
    assert reported.error is None and reported.html is not None and reported.html.is_file()
    assert reported.summary is not None and "node1" in reported.summary
    assert report_run(session, str(run.run_dir)) == reported.html
    printed = capsys.readouterr()
    assert printed.out.endswith(f"report: {reported.html}\n") and printed.err == ""


def test_a_run_not_here_without_fetching_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "elsewhere"
    assert report_run(Session(default_inventory()), str(missing), fetch=False) is None
    printed = capsys.readouterr()
    assert printed.err == f"rtk: no telemetry under {missing} on this machine\n"
    assert printed.out == ""


def test_an_empty_run_is_fetched_from_the_head_then_its_report_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # This machine is the head (local transport): the run's path is made here, the head
    # packs it (nothing in it), and the report says what is missing; nothing raises.
    missing = tmp_path / "empty"
    with Session(default_inventory()) as session:
        collected = session.collect(str(missing))
        assert (collected.path, collected.copied, collected.error) == (missing, [], None)
        reported = session.report(collected)
        assert isinstance(reported.error, RtkError) and reported.html is None
        assert report_run(session, str(missing)) is None
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"rtk: copied 0 result file(s) from the head into {missing}"
    assert err[1].startswith("rtk: report: ")


def test_a_run_without_telemetry_seen_here_stays_in_place(tmp_path: Path) -> None:
    """train_config.json, which the trainer's driver writes on the head, means a shared filesystem."""
    run_dir = tmp_path / "no-telemetry"
    run_dir.mkdir()
    (run_dir / "train_config.json").write_text("{}")
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    with Session(default_inventory()) as session:
        collected = session.collect(str(run_dir))
    assert (collected.path, collected.copied, collected.error) == (run_dir, None, None)


def test_a_run_without_telemetry_is_fetched_and_not_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The head (local transport) holds only what a --no-telemetry run left there.
    missing = tmp_path / "plain"
    with Session(default_inventory()) as session:
        assert report_run(session, str(missing), report=False) is None
    printed = capsys.readouterr()
    assert printed.err == f"rtk: copied 0 result file(s) from the head into {missing}\n"
    assert printed.out == ""
