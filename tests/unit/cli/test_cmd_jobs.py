"""``rtk launch``, ``rtk jobs``, ``rtk logs`` and ``rtk stop``: what they accept and refuse.

No cluster: a dry run shows what would be submitted, and the commands that need the
Jobs API are seen to reach it (they stop at the missing token, exit 6, after the
command line was read as meant).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from conftest import REPO

from toolkit.cli import cli

INVENTORY = """\
cluster: jobtest
nodes:
  - host: n1
    address: 10.9.0.1
"""


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RTK_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


def _rtk(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _rtk_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """rtk as a user runs it: its exit code and one-line messages come from ``main``."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def test_launch_dry_run_shows_the_merged_runtime_env(inventory: Path, tmp_path: Path) -> None:
    done = _rtk(
        "launch",
        str(inventory),
        "--dry-run",
        "--runtime-env-json",
        '{"pip": ["emoji"], "env_vars": {"A": "json", "B": "json"}}',
        "--env",
        "B=flag",
        "--working-dir",
        str(tmp_path),
        "--submission-id",
        "my-job",
        "--",
        "python",
        "-c",
        "print(1)",
    )
    assert done.exit_code == 0, done.output
    assert done.output.splitlines() == [
        "command job my-job via http://10.9.0.1:8265",
        "  entrypoint: python -c 'print(1)'",
        f"  working_dir: {tmp_path.resolve()}",
        "  excludes: ['/state']",  # rtk's state (RTK_STATE_DIR) is inside: never shipped
        "  pip: ['emoji']",
        "  env_vars:",
        "    A=json",
        "    B=flag",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--env", "NOEQUALS"], "Error: --env 'NOEQUALS': give KEY=VALUE"),
        (["--runtime-env-json", "{nope"], "Error: --runtime-env-json: not JSON"),
        (["--env", "RAY_AUTH_MODE=disabled"], "Error: RAY_AUTH_MODE: rtk sets it for"),
    ],
)
def test_launch_refuses_bad_runtime_env_options_in_one_line(
    inventory: Path, options: list[str], message: str
) -> None:
    done = _rtk("launch", str(inventory), *options, "--dry-run", "--", "python", "x.py")
    assert done.exit_code == 2
    errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(message), done.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ray", "some-job"], "--ray collects every node's logs: give no JOB and no -f"),
        (["--ray", "-f"], "--ray collects every node's logs"),
        (["some-job", "--out", "x"], "--out: only with --ray"),
        (["some-job", "--json"], "--json: only with --ray"),
        ([], "give a JOB (rtk jobs {inv} lists them), or --ray"),
        (["--ray", "--since", "2w"], "'2w': give a duration like 90s, 30m, 2h or 1d"),
    ],
)
def test_logs_usage_errors_say_what_goes_with_what(
    inventory: Path, args: list[str], message: str
) -> None:
    done = _rtk("logs", str(inventory), *args)
    assert done.exit_code == 2
    assert message.format(inv=inventory) in " ".join(done.output.split()), done.output


def test_stop_needs_a_job(inventory: Path) -> None:
    done = _rtk("stop", str(inventory))
    assert done.exit_code == 2
    assert f"give the JOB to stop (rtk jobs {inventory} lists them)" in done.output


@pytest.mark.parametrize("command", ["logs", "stop"])
def test_with_local_a_lone_word_is_the_job(inventory: Path, command: str) -> None:
    done = _rtk_process(command, "--local", "rtk-launch-local-1")
    # Read as JOB on the embedded inventory: it goes on to the Jobs API, which needs
    # the token of a cluster brought up from here.
    assert done.returncode == 6, done.stderr
    assert "no token for cluster local on this machine" in done.stderr


def test_with_rtk_inventory_set_a_lone_word_is_the_job(inventory: Path) -> None:
    done = _rtk_process("stop", "rtk-launch-jobtest-1", env={"RTK_INVENTORY": str(inventory)})
    assert done.returncode == 6, done.stderr
    assert "no token for cluster jobtest on this machine" in done.stderr


def test_jobs_json_and_all_are_options_of_jobs(inventory: Path) -> None:
    done = _rtk("jobs", "--help")
    assert done.exit_code == 0
    assert "--all" in done.output and "--json" in done.output
    assert re.search(r"newest\s+20", done.output)


def test_launch_help_teaches_no_wait_and_the_merge_rules() -> None:
    text = " ".join(_rtk("launch", "--help").output.split())
    for words in (
        "--no-wait",
        "--runtime-env-json JSON",
        "--env KEY=VALUE",
        "--env KEY=VALUE wins over the JSON's env_vars, --working-dir over its working_dir",
        "RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH",
        "rtk logs inv.yaml $JOB -f",
    ):
        assert words in text, words


def test_the_job_commands_are_registered_and_launch_left_train() -> None:
    ctx = click.Context(cli)
    assert {"launch", "jobs", "logs", "stop", "train"} <= set(cli.list_commands(ctx))
    launch = cli.get_command(ctx, "launch")
    assert launch is not None and launch.callback is not None
    assert launch.callback.__module__ == "toolkit.cli.cmd_jobs"
    source = (REPO / "toolkit" / "cli" / "cmd_train.py").read_text()
    assert '"launch"' not in source


def test_without_the_new_options_launch_submits_what_it_always_did(inventory: Path) -> None:
    done = _rtk("launch", str(inventory), "--dry-run", "--", "python", "x.py")
    assert done.exit_code == 0
    assert re.fullmatch(
        r"command job rtk-launch-jobtest-\d+ via http://10\.9\.0\.1:8265\n"
        r"  entrypoint: python x\.py\n"
        rf"  working_dir: {re.escape(str(Path.cwd().resolve()))}\n"
        r"  excludes: \['/state'\]\n",  # rtk's state (RTK_STATE_DIR) is inside the cwd
        done.output,
    )
