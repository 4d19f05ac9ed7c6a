"""rtk sbatch: rendered batch scripts pinned as whole text, run under bash with a fake rtk,
option merging and errors, and following a job through scontrol/sacct output.

Set RTK_UPDATE_GOLDEN=1 to rewrite tests/golden/sbatch/*.sbatch after a deliberate change.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO, rtk

from toolkit.cli import cli
from toolkit.cluster.containers.slurm_step import batch_script_note
from toolkit.inventory import load_inventory
from toolkit.slurm.batch_options import SbatchOptionError, SbatchOptions, merge_options
from toolkit.slurm.sbatch_script import render_script, torchrun_words
from toolkit.slurm.submit import (
    UNKNOWN,
    JobState,
    SlurmError,
    exit_status,
    expand_output_pattern,
    follow,
    parse_sacct,
    parse_scontrol_job,
    parse_submit_output,
    submit,
)

GOLDEN = REPO / "tests" / "golden" / "sbatch"

# Two CPU nodes, no slurm: section: every #SBATCH value comes from defaults.
PLAIN_INVENTORY = """\
# Two CPU nodes; rtk's Python lives in a venv on every node.
cluster: plain
defaults:
  venv: /opt/rtk/venv
nodes:
  - host: cpu[1-2]
"""

# Four GPU nodes with a slurm: section, as a site would write it.
GPU_INVENTORY = """\
cluster: h100
defaults:
  python: /shared/envs/rtk/bin/python
nodes:
  - host: gpu[01-04]
    gpus: 8
slurm:
  partition: gpu
  account: ml-research
  time: "04:00:00"
  nodes: 4
  job_name: rtk-power
"""


# Ray in a pyxis container on four GPU nodes (image from a registry through enroot).
PYXIS_INVENTORY = """\
cluster: nemo
defaults:
  python: /usr/bin/python3
  container:
    runtime: pyxis
    image: nvcr.io#nvidia/pytorch:25.02-py3
    mounts: [/lustre/data:/data:ro, /lustre/ckpt:/ckpt]
nodes:
  - host: gpu[01-04]
    gpus: 8
"""

# Ray in an apptainer image file on GPU nodes (apptainer exec --nv).
APPTAINER_INVENTORY = """\
cluster: hpc
defaults:
  python: /usr/bin/python3
  container:
    runtime: apptainer
    image: /shared/images/ray.sif
    mounts: [/scratch:/scratch]
nodes:
  - host: gpu[01-03]
    gpus: 4
"""


@pytest.fixture
def inventories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Both inventories in a fresh directory, which becomes the working directory."""
    (tmp_path / "plain.yaml").write_text(PLAIN_INVENTORY)
    (tmp_path / "gpu.yaml").write_text(GPU_INVENTORY)
    (tmp_path / "pyxis.yaml").write_text(PYXIS_INVENTORY)
    (tmp_path / "apptainer.yaml").write_text(APPTAINER_INVENTORY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def render(
    name: str, template: str, command: tuple[str, ...] = (), **given: object
) -> tuple[str, SbatchOptions]:
    inventory = load_inventory(name)
    options = merge_options(inventory, given)
    text = Path(name).read_text()
    note = batch_script_note(inventory)
    return render_script(template, text, name, options, command, note), options


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("RTK_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"rendered script changed; diff against {path}"


def bash_n(script: str, tmp_path: Path) -> None:
    path = tmp_path / "check.sbatch"
    path.write_text(script)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


# The configurations pinned as whole text: (golden file, inventory, template, command, options).
CONFIGURATIONS = [
    ("cluster-hold.sbatch", "plain.yaml", "cluster", (), {"preflight": "record"}),
    (
        "cluster-command.sbatch",
        "plain.yaml",
        "cluster",
        ("python", "my_ray_program.py", "--name", "it's $HOME; `id`"),
        {
            "time": "30",
            "exclusive": True,
            "extra_args": ("--qos=high", "--constraint=h100"),
            "job_output": "logs/%x-%j.log",
            "output_dir": "/scratch/runs",
            "run_id": "first-try",
        },
    ),
    (
        "train.sbatch",
        "gpu.yaml",
        "train",
        ("--model-size", "350M", "--strategy", "fsdp2", "--barrier-every", "10"),
        {"nodes": 2, "grace_s": 300},
    ),
    (
        "train-defaults.sbatch",
        "plain.yaml",
        "train",
        (),
        {"preflight": "skip", "output_dir": "~/rtk-runs", "python": "/usr/bin/python3"},
    ),
    ("cluster-pyxis.sbatch", "pyxis.yaml", "cluster", (), {}),
    ("train-apptainer.sbatch", "apptainer.yaml", "train", (), {"nodes": 3}),
    (
        "torchrun.sbatch",
        "plain.yaml",
        "torchrun",
        ("--auto-steps", "--", "train_ddp.py", "--epochs", "1"),
        {"nodes": 3},
    ),
    (
        "train-requeue.sbatch",
        "plain.yaml",
        "train",
        ("--max-steps", "50000", "--save-steps", "1000"),
        {"requeue": True, "time": "04:00:00"},
    ),
]


@pytest.mark.parametrize(("golden", "name", "template", "command", "given"), CONFIGURATIONS)
def test_rendered_script_is_pinned_and_bash_accepts_it(
    golden: str,
    name: str,
    template: str,
    command: tuple[str, ...],
    given: dict[str, object],
    inventories: Path,
) -> None:
    script, _ = render(name, template, command, **given)
    check_golden(golden, script)
    bash_n(script, inventories)
    assert "/tmp/pytest" not in script and str(inventories) not in script


def test_cli_render_prints_the_same_script(inventories: Path) -> None:
    done = rtk(
        "sbatch",
        "render",
        "gpu.yaml",
        "--template",
        "train",
        "--nodes",
        "2",
        "--grace-s",
        "300",
        "--",
        "--model-size",
        "350M",
        "--strategy",
        "fsdp2",
        "--barrier-every",
        "10",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (GOLDEN / "train.sbatch").read_text()
    written = inventories / "job.sbatch"
    done = rtk("sbatch", "render", "plain.yaml", "--preflight", "record", "-o", str(written))
    assert done.returncode == 0, done.stderr
    assert written.read_text() == (GOLDEN / "cluster-hold.sbatch").read_text()
    assert "sbatch " in done.stderr


def test_directives_follow_the_options(inventories: Path) -> None:
    script, options = render("gpu.yaml", "train", gpus_per_node=0, exclusive=True)
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=rtk-power",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=ml-research",
        "#SBATCH --time=04:00:00",
        "#SBATCH --output=rtk-%x-%j.out",
        "#SBATCH --exclusive",
        "#SBATCH --signal=B:USR1@180",
    ]
    assert options.stop_wait_s == 90


def test_inventory_text_is_embedded_verbatim_even_with_the_heredoc_end_in_it(
    inventories: Path,
) -> None:
    text = GPU_INVENTORY + "# RTK_INVENTORY_EOF\nRTK_INVENTORY_EOF_x: 1\n"
    options = merge_options(load_inventory("gpu.yaml"), {})
    script = render_script("cluster", text, "gpu.yaml", options)
    assert f"<<'RTK_INVENTORY_EOF'\n{text}RTK_INVENTORY_EOF\n" in script
    tricky = text + "RTK_INVENTORY_EOF\n"
    script = render_script("cluster", tricky, "gpu.yaml", options)
    assert f"<<'RTK_INVENTORY_EOF_1'\n{tricky}RTK_INVENTORY_EOF_1\n" in script
    no_newline = render_script("cluster", "cluster: x", "gpu.yaml", options)
    assert "cluster: x\nRTK_INVENTORY_EOF\n" in no_newline


# --- options: merging and validation -------------------------------------------------


def test_command_line_beats_inventory_beats_defaults(inventories: Path) -> None:
    gpu = load_inventory("gpu.yaml")
    merged = merge_options(gpu, {"partition": "debug", "time": None, "nodes": 8})
    assert (merged.partition, merged.time, merged.nodes) == ("debug", "04:00:00", 8)
    assert (merged.account, merged.job_name, merged.gpus_per_node) == (
        "ml-research",
        "rtk-power",
        8,
    )
    assert merged.python == "/shared/envs/rtk/bin/python"
    plain = merge_options(load_inventory("plain.yaml"), {})
    assert (plain.job_name, plain.nodes, plain.gpus_per_node) == ("rtk-plain", 2, 0)
    assert (plain.partition, plain.account, plain.time) == (None, None, None)
    assert plain.python == "/opt/rtk/venv/bin/python"
    assert (plain.output_dir, plain.run_id, plain.preflight) == ("rtk-runs", None, "enforce")


def test_every_bad_value_is_named_with_where_it_came_from(inventories: Path) -> None:
    with pytest.raises(SbatchOptionError) as caught:
        merge_options(
            load_inventory("gpu.yaml"),
            {
                "job_name": "x\necho pwned",
                "partition": "gpu;rm",
                "time": "90min",
                "nodes": 0,
                "gpus_per_node": -1,
                "grace_s": 5,
                "job_output": "my log.out",
                "run_id": "../up",
                "extra_args": ("--output=x.log", "-C h100", "--qos high", "--ntasks-per-node=2"),
            },
        )
    message = str(caught.value)
    assert caught.value.exit_code == 2
    for expected in (
        "--job-name: got 'x\\necho pwned'; allowed: letters, digits",
        "--partition: got 'gpu;rm'",
        "--time: got '90min'; allowed: minutes, HH:MM:SS or D-HH:MM:SS",
        "--nodes: got 0; give 1 or more nodes",
        "--gpus-per-node: got -1",
        "--grace-s: got 5; give 10 to 65535 seconds",
        "--job-output: got 'my log.out'",
        "--run-id: got '../up'",
        "--sbatch-arg '--output=x.log': rtk writes --output itself; use rtk's --job-output",
        "--sbatch-arg '-C h100': give one long option as --name=value",
        "--sbatch-arg '--qos high'",
        "--sbatch-arg '--ntasks-per-node=2': rtk writes --ntasks-per-node itself; rtk always",
    ):
        assert expected in message
    assert len(message.splitlines()) == 12


def test_an_empty_value_given_is_refused_not_replaced_by_a_default(inventories: Path) -> None:
    # --job-name= used to give rtk-<cluster>, passing over the inventory's job_name.
    with pytest.raises(SbatchOptionError) as caught:
        merge_options(
            load_inventory("gpu.yaml"),
            {"job_name": "", "job_output": "", "output_dir": " ", "python": ""},
        )
    assert str(caught.value).splitlines() == [
        "--job-name: got ''; allowed: letters, digits and . _ + - (at most 128)",
        "--job-output: got ''; allowed: a path without spaces or quotes",
        "--output-dir: got an empty path; give a directory (default: rtk-runs)",
        "--python: got an empty path; give the Python that has rtk installed",
    ]


def test_bad_inventory_values_name_the_inventory(inventories: Path) -> None:
    (inventories / "bad.yaml").write_text(
        GPU_INVENTORY.replace("job_name: rtk-power", "job_name: power run")
    )
    with pytest.raises(SbatchOptionError, match=r"bad.yaml: slurm.job_name: got 'power run'"):
        merge_options(load_inventory("bad.yaml"), {})


def test_mixed_gpu_counts_ask_for_gpus_per_node(inventories: Path) -> None:
    (inventories / "mixed.yaml").write_text(
        "cluster: mixed\nnodes:\n  - host: a\n    gpus: 4\n  - host: b\n    gpus: 8\n"
    )
    with pytest.raises(SbatchOptionError, match=r"\(a: 4, b: 8\).*--gpus-per-node"):
        merge_options(load_inventory("mixed.yaml"), {})
    assert merge_options(load_inventory("mixed.yaml"), {"gpus_per_node": 8}).gpus_per_node == 8


def test_unknown_template_is_refused(inventories: Path) -> None:
    options = merge_options(load_inventory("plain.yaml"), {})
    with pytest.raises(SbatchOptionError, match="give one of cluster, train"):
        render_script("serve", PLAIN_INVENTORY, "plain.yaml", options)


# --- the CLI -------------------------------------------------------------------------


def test_help_teaches_with_examples() -> None:
    runner = CliRunner()
    top = runner.invoke(cli, ["--help"])
    assert "rtk sbatch submit inv.yaml" in top.output
    for command in ("render", "submit"):
        done = runner.invoke(cli, ["sbatch", command, "--help"])
        assert done.exit_code == 0
        assert "Examples:" in done.output and f"rtk sbatch {command} inv.yaml" in done.output
        for option in ("--nodes", "--gpus-per-node", "--partition", "--account", "--time"):
            assert option in done.output
    assert "--wait" in runner.invoke(cli, ["sbatch", "submit", "--help"]).output


def test_bad_options_are_usage_errors(inventories: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["sbatch", "render", "plain.yaml", "--nodez", "3"])
    assert done.exit_code == 2 and "No such option '--nodez'" in done.output
    done = runner.invoke(cli, ["sbatch", "render", "plain.yaml", "--template", "serve"])
    assert done.exit_code == 2 and "'serve' is not one of 'cluster', 'train'" in done.output
    done = runner.invoke(cli, ["sbatch", "render", "missing.yaml"])
    assert done.exit_code == 2 and "does not exist" in done.output
    train = ["sbatch", "render", "plain.yaml", "--template", "train", "--"]
    done = runner.invoke(cli, [*train, "--modelsize", "350M"])
    assert done.exit_code == 2 and "Did you mean '--model-size'?" in done.output
    done = runner.invoke(cli, [*train, "--run-id=x"])
    assert done.exit_code == 2 and "give rtk sbatch --run-id instead" in done.output
    done = runner.invoke(cli, [*train, "--no-preflight"])
    assert done.exit_code == 2 and "give rtk sbatch --preflight skip instead" in done.output


def test_option_errors_are_one_line_each_without_traceback(inventories: Path) -> None:
    done = rtk("sbatch", "render", "plain.yaml", "--time", "soon", "--job-name", "a b")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "rtk: --job-name: got 'a b'; allowed: letters, digits and . _ + - (at most 128)",
        "rtk: --time: got 'soon'; allowed: minutes, HH:MM:SS or D-HH:MM:SS, e.g. 04:00:00",
    ]
    assert done.stdout == ""


def test_submit_without_sbatch_says_where_to_run(inventories: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = rtk("sbatch", "submit", "plain.yaml", env={"PATH": str(empty)})
    assert done.returncode == 8
    assert "sbatch is not on PATH: run rtk sbatch submit on a SLURM login node" in done.stderr
    assert "Traceback" not in done.stderr


def test_submit_dry_run_prints_the_script_and_submits_nothing(
    inventories: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "sbatch-called"
    fake_tool(bin_dir, "sbatch", f"touch {called}; echo 1")
    path = f"{bin_dir}:{os.environ['PATH']}"
    done = rtk(
        "sbatch", "submit", "plain.yaml", "--dry-run", "--", "python", "x.py", env={"PATH": path}
    )
    assert done.returncode == 0, done.stderr
    rendered = rtk("sbatch", "render", "plain.yaml", "--", "python", "x.py")
    assert done.stdout == rendered.stdout  # the very script submit would send
    assert "would submit this with `sbatch --parsable`" in done.stderr
    assert not called.exists()


# --- submitting and following (fake sbatch; scontrol lines in SLURM's own format) -----


def fake_tool(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


def test_submit_pipes_the_script_and_reads_the_job_id(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(
        bin_dir, "sbatch", f'echo "$@" >{tmp_path}/argv\ncat >{tmp_path}/stdin\necho "77;c1"\n'
    )
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    assert submit("#!/bin/bash\necho hi\n", env, sbatch=str(bin_dir / "sbatch")) == "77"
    assert (tmp_path / "argv").read_text() == "--parsable\n"
    assert (tmp_path / "stdin").read_text() == "#!/bin/bash\necho hi\n"
    fake_tool(
        bin_dir, "sbatch", 'echo "sbatch: error: invalid partition specified: gpux" >&2\nexit 1\n'
    )
    with pytest.raises(SlurmError, match="sbatch refused the job: .*invalid partition"):
        submit("x", env, sbatch=str(bin_dir / "sbatch"))


def test_cli_submit_wait_prints_the_log_and_exits_with_the_job(
    inventories: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "sbatch", f"cat >{tmp_path}/submitted\necho 4242\n")
    log = inventories / "rtk-rtk-plain-4242.out"
    log.write_text("rtk-sbatch: 10:00:00 bringing up Ray on 2 node(s)\n")
    line = ended("FAILED", "NonZeroExitCode", "3:0").replace(
        "/home/alice/my runs/rtk-rtk-power-4242.out", str(log)
    )
    fake_tool(bin_dir, "scontrol", f"echo {shlex.quote(line)}\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = rtk("sbatch", "submit", "plain.yaml", "--wait", "--", "python", "x.py", env=env)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "4242\nrtk-sbatch: 10:00:00 bringing up Ray on 2 node(s)\n"
    assert "rtk: job 4242 FAILED, exit code 3, reason NonZeroExitCode" in done.stderr
    rendered = rtk("sbatch", "render", "plain.yaml", "--", "python", "x.py").stdout
    assert (tmp_path / "submitted").read_text() == rendered
    done = rtk("sbatch", "submit", "plain.yaml", env=env)
    assert (done.returncode, done.stdout) == (0, "4242\n")
    assert "its log: rtk-rtk-plain-4242.out" in done.stderr


def test_parse_submit_output() -> None:
    assert parse_submit_output("12345\n") == "12345"
    assert parse_submit_output("12345;cluster1\n") == "12345"
    with pytest.raises(SlurmError, match="no job id"):
        parse_submit_output("Submitted batch job\n")


RUNNING = (
    "JobId=4242 JobName=rtk-power UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
    "Priority=4294901757 Nice=0 Account=ml-research QOS=normal JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:01:02 "
    "TimeLimit=04:00:00 TimeMin=N/A SubmitTime=2025-03-01T10:00:00 "
    "EligibleTime=2025-03-01T10:00:00 AccrueTime=2025-03-01T10:00:00 "
    "StartTime=2025-03-01T10:00:01 EndTime=2025-03-01T14:00:01 Deadline=N/A "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2025-03-01T10:00:01 Scheduler=Main "
    "Partition=gpu AllocNode:Sid=login1:31337 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=gpu[01-04] BatchHost=gpu01 NumNodes=4 NumCPUs=4 NumTasks=4 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* ReqTRES=cpu=4,mem=16G,node=4,billing=4,gres/gpu=32 "
    "AllocTRES=cpu=4,mem=16G,node=4,billing=4,gres/gpu=32 Socks/Node=* "
    "NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=4G MinTmpDiskNode=0 "
    "Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=(null) WorkDir=/home/alice/my runs "
    "StdErr=/home/alice/my runs/rtk-rtk-power-4242.out StdIn=/dev/null "
    "StdOut=/home/alice/my runs/rtk-rtk-power-4242.out Power= TresPerNode=gres/gpu:8"
)


def ended(state: str, reason: str, exit_code: str, derived: str = "0:0") -> str:
    return (
        RUNNING.replace("JobState=RUNNING Reason=None", f"JobState={state} Reason={reason}")
        .replace("ExitCode=0:0", f"ExitCode={exit_code} DerivedExitCode={derived}")
        .replace("RunTime=00:01:02", "RunTime=00:12:00")
    )


def test_parse_scontrol_job_lines() -> None:
    running = parse_scontrol_job(RUNNING + "\n", "4242")
    assert running == JobState(
        "4242",
        "RUNNING",
        exit_code=0,
        signal=0,
        stdout_path="/home/alice/my runs/rtk-rtk-power-4242.out",
        reason="None",
        source="scontrol",
    )
    assert not running.terminal
    failed = parse_scontrol_job(ended("FAILED", "NonZeroExitCode", "3:0", "0:9"), "4242")
    assert failed is not None and failed.terminal
    assert (failed.state, failed.exit_code, failed.signal) == ("FAILED", 3, 0)
    assert exit_status(failed) == 3
    assert failed.describe() == "FAILED, exit code 3, reason NonZeroExitCode"
    cancelled = parse_scontrol_job(ended("CANCELLED", "None", "0:15"), "4242")
    assert cancelled is not None and exit_status(cancelled) == 143
    assert cancelled.describe() == "CANCELLED, signal 15"
    timeout = parse_scontrol_job(ended("TIMEOUT", "TimeLimit", "0:0"), "4242")
    assert timeout is not None and timeout.terminal and exit_status(timeout) == 1
    completed = parse_scontrol_job(ended("COMPLETED", "None", "0:0"), "4242")
    assert completed is not None and exit_status(completed) == 0
    pending = RUNNING.replace("JobState=RUNNING Reason=None", "JobState=PENDING Reason=Priority")
    state = parse_scontrol_job(pending, "4242")
    assert state is not None and (state.state, state.reason, state.terminal) == (
        "PENDING",
        "Priority",
        False,
    )
    assert parse_scontrol_job(RUNNING, "999") is None
    assert parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n", "4242") is None


def test_parse_sacct_lines() -> None:
    text = "4242|CANCELLED by 1000|0:15\n"
    state = parse_sacct(text, "4242")
    assert state == JobState("4242", "CANCELLED", 0, 15, source="sacct")
    assert parse_sacct("4242|COMPLETED|0:0\n", "4242") == JobState(
        "4242", "COMPLETED", 0, 0, source="sacct"
    )
    assert parse_sacct("", "4242") is None


def test_expand_output_pattern() -> None:
    assert expand_output_pattern("rtk-%x-%j.out", "42", "rtk-power") == "rtk-rtk-power-42.out"
    assert expand_output_pattern("logs/%u/%8j-%N.log", "42", "x", user="alice") == (
        "logs/alice/00000042-%N.log"
    )
    assert expand_output_pattern("100%%-%A", "42", "x") == "100%-42"


def test_follow_prints_the_output_as_it_grows_until_the_end(tmp_path: Path) -> None:
    log = tmp_path / "rtk-rtk-power-4242.out"
    line = RUNNING.replace("/home/alice/my runs/rtk-rtk-power-4242.out", str(log))
    pending = line.replace("JobState=RUNNING Reason=None", "JobState=PENDING Reason=Resources")
    states = iter(
        [
            pending,
            line,
            line,
            line.replace("JobState=RUNNING", "JobState=COMPLETING"),
            ended("COMPLETED", "None", "0:0").replace(
                "/home/alice/my runs/rtk-rtk-power-4242.out", str(log)
            ),
        ]
    )
    # The euro sign arrives split across two reads.
    writes = iter([b"", b"rtk-sbatch: up\nstep 1 \xe2", b"\x82\xac\n", b"done\n"])
    printed: list[str] = []

    def query(job_id: str) -> JobState | None:
        return parse_scontrol_job(next(states), job_id)

    def sleep(seconds: float) -> None:
        assert seconds == 0.5
        chunk = next(writes)
        with log.open("ab") as file:
            file.write(chunk)

    state = follow("4242", "fallback.out", printed.append, 0.5, query, sleep)
    assert state.state == "COMPLETED" and exit_status(state) == 0
    assert "".join(printed) == "rtk-sbatch: up\nstep 1 \u20ac\ndone\n"


def test_follow_reports_a_job_slurm_forgot_as_unknown(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_text("last words\n")
    printed: list[str] = []
    naps: list[float] = []
    state = follow("4242", str(log), printed.append, 1.0, lambda _id: None, naps.append)
    assert state.state == UNKNOWN and exit_status(state) == 1
    assert "outcome unknown" in state.describe()
    assert printed == ["last words\n"] and len(naps) == 4


def test_follow_asks_sacct_when_scontrol_forgot(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(
        bin_dir, "scontrol", 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n'
    )
    fake_tool(bin_dir, "sacct", 'echo "4242|TIMEOUT|0:0"\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from toolkit.slurm.submit import query_job; s = query_job('4242'); "
            "print(s.state, s.source)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.stdout.strip() == "TIMEOUT sacct", done.stderr


# --- the scripts at work: bash runs them with a fake rtk in place of python -m toolkit ---

# Stands in for `python -m toolkit SUBCOMMAND ...`: logs each call; the workload
# (train, telemetry record) runs until it ends or SIGINT comes.
FAKE_PYTHON = r"""#!/bin/bash
shift 2
echo "$*" >>"$FAKE_LOG"
case "$1" in
  up) exit "${FAKE_UP_STATUS:-0}" ;;
  preflight) exit "${FAKE_PREFLIGHT_STATUS:-0}" ;;
  train | telemetry)
    if [[ -n ${FAKE_MANIFEST:-} ]]; then
      mkdir -p "$(dirname "$FAKE_MANIFEST")" && echo '{}' >"$FAKE_MANIFEST"
    fi
    if [[ -n ${FAKE_IGNORE_INT:-} ]]; then
      trap '' INT
    else
      trap 'kill "$sleeper"; echo "workload got SIGINT" >>"$FAKE_LOG"; exit 130' INT
    fi
    echo "workload started" >>"$FAKE_LOG"
    sleep "${FAKE_WORK_S:-0}" </dev/null >/dev/null 2>&1 &
    sleeper=$!
    echo "$sleeper" >>"$FAKE_LOG.sleepers"
    wait "$sleeper"
    exit "${FAKE_WORK_STATUS:-0}"
    ;;
  *) exit 0 ;;
esac
"""


class Job:
    """A rendered script running under bash as SLURM would start it."""

    def __init__(self, tmp_path: Path, script: str, env: dict[str, str]) -> None:
        self.submit_dir = tmp_path / "submit"
        self.submit_dir.mkdir(exist_ok=True)
        self.log = tmp_path / "calls.log"
        self.log.touch()
        path = tmp_path / "job.sbatch"
        path.write_text(script)
        self.process = subprocess.Popen(
            ["bash", str(path)],
            cwd=self.submit_dir,
            env={
                "PATH": os.environ["PATH"],
                "HOME": str(tmp_path / "home"),
                "SLURM_JOB_ID": "4242",
                "SLURM_JOB_NAME": "rtk-test",
                "SLURM_SUBMIT_DIR": str(self.submit_dir),
                "SLURM_JOB_NUM_NODES": "2",
                "SLURM_JOB_NODELIST": "cpu[1-2]",
                "FAKE_LOG": str(self.log),
                **env,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output = ""

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()

    def wait_for(self, line: str, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while line not in self.calls():
            assert time.monotonic() < deadline, f"never saw {line!r}: {self.calls()}"
            assert self.process.poll() is None, self.finish()
            time.sleep(0.05)

    def finish(self, timeout_s: float = 60) -> int:
        self.output, _ = self.process.communicate(timeout=timeout_s)
        return self.process.returncode


@pytest.fixture
def job_env(tmp_path: Path, inventories: Path) -> Iterator[dict[str, object]]:
    fake = fake_tool(tmp_path, "fake-python", FAKE_PYTHON.removeprefix("#!/bin/bash\n"))
    jobs: list[Job] = []
    yield {"python": str(fake), "jobs": jobs}
    for job in jobs:
        if job.process.poll() is None:
            job.process.kill()
            job.process.wait()
    # A workload killed with SIGKILL leaves its sleep behind.
    sleepers = tmp_path / "calls.log.sleepers"
    for pid in sleepers.read_text().split() if sleepers.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def start(
    tmp_path: Path,
    job_env: dict[str, object],
    template: str,
    command: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    **given: object,
) -> Job:
    script, _ = render("plain.yaml", template, command, python=job_env["python"], **given)
    job = Job(tmp_path, script, env or {})
    jobs = job_env["jobs"]
    assert isinstance(jobs, list)
    jobs.append(job)
    return job


INV = "{submit}/.rtk/job-4242/inventory.yaml"


def expected(job: Job, *calls: str) -> list[str]:
    return [c.format(submit=job.submit_dir, inv=INV.format(submit=job.submit_dir)) for c in calls]


def test_train_job_runs_every_step_then_tears_down(
    tmp_path: Path, job_env: dict[str, object]
) -> None:
    run_dir = f"{tmp_path}/submit/rtk-runs/rtk-test-4242"
    job = start(
        tmp_path,
        job_env,
        "train",
        ("--max-steps", "5"),
        env={"FAKE_MANIFEST": f"{run_dir}/telemetry/manifest.json"},
    )
    assert job.finish() == 0, job.output
    # One process brings Ray up and trains (rtk train --up): its driver imports meanwhile.
    assert job.calls() == expected(
        job,
        "train --slurm {inv} --up --output-dir {submit}/rtk-runs --run-id rtk-test-4242 "
        "--max-steps 5",
        "workload started",
        "down --slurm {inv}",
        "report {submit}/rtk-runs/rtk-test-4242",
    )
    assert (job.submit_dir / ".rtk/job-4242/inventory.yaml").read_text() == PLAIN_INVENTORY
    assert "rtk-sbatch: " in job.output and "bringing up Ray on 2 node(s)" in job.output
    assert "job 4242 ends with status 0" in job.output


def test_failures_keep_their_status_and_still_tear_down(
    tmp_path: Path, job_env: dict[str, object]
) -> None:
    job = start(tmp_path, job_env, "train", env={"FAKE_WORK_STATUS": "3"}, output_dir="~/runs")
    assert job.finish() == 3, job.output
    assert f"--output-dir {tmp_path}/home/runs --run-id rtk-test-4242" in job.calls()[0]
    assert job.calls()[-1] == expected(job, "down --slurm {inv}")[0]
    job.log.unlink()
    job = start(tmp_path, job_env, "cluster", env={"FAKE_UP_STATUS": "4"})
    assert job.finish() == 4, job.output
    assert job.calls() == expected(job, "up --slurm {inv} --no-preflight", "down --slurm {inv}")


def test_preflight_enforce_stops_a_failed_check_record_goes_on(
    tmp_path: Path, job_env: dict[str, object]
) -> None:
    failing = {"FAKE_PREFLIGHT_STATUS": "1"}
    job = start(tmp_path, job_env, "cluster", ("python", "my.py"), env=failing)
    assert job.finish() == 1
    assert job.calls() == expected(
        job,
        "up --slurm {inv} --no-preflight",
        "preflight --slurm {inv} --output-dir {submit}/rtk-runs --output "
        "{submit}/rtk-runs/rtk-test-4242/preflight.json",
        "down --slurm {inv}",
    )
    job.log.unlink()
    job = start(tmp_path, job_env, "train", env=failing, preflight="record")
    assert job.finish() == 0, job.output
    assert [c.split()[0] for c in job.calls()] == ["up", "preflight", "train", "workload", "down"]
    assert job.calls()[2].endswith("--run-id rtk-test-4242 --no-preflight")
    assert "preflight found problems (status 1); going on" in job.output


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGUSR1, 138)])
def test_scancel_and_time_limit_stop_the_workload_with_sigint(
    sig: signal.Signals, status: int, tmp_path: Path, job_env: dict[str, object]
) -> None:
    job = start(
        tmp_path,
        job_env,
        "cluster",
        ("python", "my.py", "it's; touch PWNED"),
        env={"FAKE_WORK_S": "60"},
        output_dir=str(tmp_path / "runs"),
    )
    job.wait_for("workload started")
    began = time.monotonic()
    job.process.send_signal(sig)
    assert job.finish() == status, job.output
    assert time.monotonic() - began < 10
    calls = job.calls()
    assert calls[-2:] == ["workload got SIGINT", expected(job, "down --slurm {inv}")[0]]
    assert calls[2].endswith("--run-id rtk-test-4242 -- python my.py it's; touch PWNED")
    assert not (job.submit_dir / "PWNED").exists()
    assert "the step ended with status 130" in job.output


def test_time_limit_stops_the_trainer_then_tears_down_then_asks_to_requeue(
    tmp_path: Path, job_env: dict[str, object]
) -> None:
    runs = tmp_path / "runs"
    job = start(
        tmp_path,
        job_env,
        "train",
        ("--max-steps", "50"),
        env={"FAKE_WORK_S": "60", "SLURM_RESTART_COUNT": "1"},
        output_dir=str(runs),
        max_restarts=2,
    )
    job.wait_for("workload started")
    job.process.send_signal(signal.SIGUSR1)
    assert job.finish() == 138, job.output
    calls = job.calls()
    assert calls[0].endswith("--run-id rtk-test-4242 --checkpoint-on-stop --max-steps 50")
    assert calls[2:4] == ["workload got SIGINT", expected(job, "down --slurm {inv}")[0]]
    requeue = calls[4].split()
    assert requeue[:3] == ["sbatch", "requeue", f"{runs}/rtk-test-4242"]
    assert requeue[3:11] == [
        *("--job-id", "4242", "--restart-count", "1"),
        *("--max-restarts", "2", "--ended-by", "USR1"),
    ]
    assert requeue[11] == "--started-s" and abs(int(requeue[12]) - time.time()) < 60
    assert requeue[13:] == ["--nodes", "cpu[1-2]"]
    assert len(calls) == 5
    # Ended by itself, it still asks (and is told no: the run directory decides).
    job.log.unlink()
    job = start(tmp_path, job_env, "train", output_dir=str(runs), requeue=True)
    assert job.finish() == 0, job.output
    assert "--ended-by end" in job.calls()[-1]


def test_held_cluster_ends_cleanly_at_the_time_limit(
    tmp_path: Path, job_env: dict[str, object]
) -> None:
    job = start(tmp_path, job_env, "cluster")
    job.wait_for("status --slurm " + INV.format(submit=job.submit_dir))
    time.sleep(0.3)  # the job is now in `sleep infinity`
    job.process.send_signal(signal.SIGUSR1)
    assert job.finish() == 0, job.output
    assert [c.split()[0] for c in job.calls()] == ["up", "preflight", "status", "down"]
    assert "holding it until the time limit" in job.output


def test_a_workload_deaf_to_sigint_is_killed_after_the_wait(
    tmp_path: Path, job_env: dict[str, object]
) -> None:
    job = start(
        tmp_path, job_env, "train", env={"FAKE_WORK_S": "20", "FAKE_IGNORE_INT": "1"}, grace_s=10
    )
    job.wait_for("workload started")
    job.process.send_signal(signal.SIGTERM)
    assert job.finish() == 143, job.output
    assert "still runs after 5 s; killing it" in job.output
    assert job.calls()[-1] == expected(job, "down --slurm {inv}")[0]


def test_outside_slurm_the_script_says_so(tmp_path: Path, inventories: Path) -> None:
    script, _ = render("plain.yaml", "cluster")
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "not inside a SLURM job: submit this script with sbatch" in done.stderr
    assert shutil.which("bash")


def test_torchrun_words_put_the_script_after_a_double_dash() -> None:
    assert torchrun_words(["train.py", "--epochs", "1"]) == ["--", "train.py", "--epochs", "1"]
    given = ["--auto-steps", "--", "train.py", "--x"]
    assert torchrun_words(given) == given


def test_torchrun_options_are_parsed_before_the_job_is_queued(inventories: Path) -> None:
    done = rtk("sbatch", "render", "plain.yaml", "--template", "torchrun", "--", "train.py")
    assert done.returncode == 0, done.stderr
    assert "torchrun --slurm" in done.stdout and " -- train.py\n" not in done.stdout
    assert '--run-id "$RTK_RUN_ID" -- train.py ||' in done.stdout
    bad = rtk(
        "sbatch",
        "render",
        "plain.yaml",
        "--template",
        "torchrun",
        "--",
        "--nproc-per-node",
        "zero",
        "--",
        "train.py",
    )
    assert bad.returncode == 2
    assert "the words after -- (rtk torchrun's)" in bad.stderr and "zero" in bad.stderr
