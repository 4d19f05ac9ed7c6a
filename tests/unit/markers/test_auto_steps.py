"""--auto-steps: a plain DDP script nobody edited, run by torchrun (or with torchrun's
environment) through ``python -m toolkit.markers.auto_steps``, writes every step and
every backward of every rank; the hooks count the first optimizer only and leave
evaluation out; the runner passes exit statuses and exceptions through."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from marker_ranks import by_rank, events, python_env, run_ranks

from toolkit.markers import auto_steps, recorder
from toolkit.rundir import Marker, read_markers

RUNNER = ["-m", "toolkit.markers.auto_steps"]

# As a user writes it: no rtk import. argv: steps, the rank late to its backward (1,
# or -1: none), how late. Rank 1 then starts its backward only once rank 0 is inside
# its own (a hook on the loss's gradient says so in a file), and late_s after.
DDP_SCRIPT = """
import sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def main():
    steps, late_rank, late_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dist.barrier()
    for step in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        inside = Path(f"rank0-in-backward-{step}")
        if late_rank == 1 and rank == 0:
            loss.register_hook(lambda grad: inside.touch())
        elif late_rank == 1 and rank == 1:
            give_up = time.monotonic() + 60
            while not inside.exists():
                assert time.monotonic() < give_up, "rank 0 never began its backward"
                time.sleep(0.01)
            time.sleep(late_s)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
"""

ONE_STEP = ["step_begin", "phase_begin:backward", "phase_end:backward", "step_end"]


def backward_s(written: list[Marker]) -> dict[int, float]:
    """Each step's last backward: its duration, end minus begin, on the node's clock."""
    began: dict[int, float] = {}
    took: dict[int, float] = {}
    for m in written:
        if m.event == "phase_begin" and m.step is not None:
            began[m.step] = m.mono_s
        elif m.event == "phase_end" and m.step is not None:
            took[m.step] = m.mono_s - began[m.step]
    return took


def test_torchrun_ranks_write_every_step_with_its_backward(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*torchrun, "--nproc-per-node", "2", *RUNNER, "train.py", "4", "-1", "0"],
        cwd=tmp_path,
        env=python_env(tmp_path / "run"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # torch's abort in the interpreter's finalization (marker_ranks.TORCH_EXIT_ABORT),
    # which made torchrun exit 1 in a few runs of ten, is skipped by the runner.
    assert done.returncode == 0, done.stderr
    found = by_rank(tmp_path / "run")
    assert sorted(found) == [0, 1]
    for rank, written in found.items():
        assert events(written) == [
            ("run_start", None),
            *[(event, step) for step in range(4) for event in ONE_STEP],
            ("run_end", 3),
        ], rank
        assert written[0].fields == {"steps_from": "auto"}
        assert {(m.local_rank, m.world_size) for m in written} == {(rank, 2)}


def test_a_rank_late_to_backward_shows_as_the_others_longer_backward(tmp_path: Path) -> None:
    """Rank 1 starts its backward once rank 0 is inside its own, and ``late_s`` after.

    The all-reduce inside rank 0's backward waits for rank 1's, so rank 0's backward
    lasts longer than ``late_s`` whatever the load, and longer than rank 1's (which
    finds rank 0's gradients there), at every step.
    """
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    late_s = 0.5
    ranks = run_ranks([*RUNNER, "train.py", "2", "1", str(late_s)], 2, tmp_path / "run", tmp_path)
    assert all(r.returncode == 0 for r in ranks), [(r.returncode, r.stderr) for r in ranks]
    found = by_rank(tmp_path / "run")
    waiting, late = backward_s(found[0]), backward_s(found[1])
    assert sorted(waiting) == sorted(late) == [0, 1]
    assert all(waiting[s] > late_s for s in waiting), (waiting, late_s)
    assert all(waiting[s] > late[s] for s in waiting), (waiting, late)


@pytest.fixture
def hooks(tmp_path: Path) -> Iterator[auto_steps.AutoSteps]:
    """The hooks installed in this process, markers on for ``tmp_path``; all undone after."""
    recorder.reset({"RTK_RUN_DIR": str(tmp_path)})
    original = torch.autograd.backward
    installed = auto_steps.AutoSteps()
    installed.install()
    try:
        yield installed
    finally:
        installed.uninstall()
        recorder.reset({})
    assert torch.autograd.backward is original


def test_the_first_optimizer_counts_and_evaluation_is_no_step(
    hooks: auto_steps.AutoSteps, tmp_path: Path
) -> None:
    model, critic = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    first = torch.optim.SGD(model.parameters(), lr=0.1)
    second = torch.optim.SGD(critic.parameters(), lr=0.1)
    with torch.no_grad():
        model(torch.ones(1, 3))  # an evaluation before training begins no step
    for _ in range(2):
        for _ in range(2):  # gradient accumulation: two backwards a step
            model(torch.ones(2, 3)).sum().backward()
        first.step()
        critic(torch.ones(2, 3)).sum().backward()
        second.step()  # not counted: the first optimizer seen is
    with torch.no_grad():
        model(torch.ones(1, 3))  # evaluation after the last step
    written = read_markers(tmp_path)
    backward = ["phase_begin:backward", "phase_end:backward"]
    assert events(written) == [
        ("run_start", None),
        ("step_begin", 0),
        *[(event, 0) for event in backward * 2],
        ("step_end", 0),
        ("step_begin", 1),  # the critic's backward is activity: step 1 begins there
        *[(event, 1) for event in backward * 3],
        ("step_end", 1),
        *[(event, 2) for event in ["step_begin", *backward]],  # the critic's, again
    ]


def test_a_backward_inside_a_backward_is_one_phase(
    hooks: auto_steps.AutoSteps, tmp_path: Path
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    x = torch.ones(2, 3, requires_grad=True)
    # Reentrant checkpointing runs torch.autograd.backward inside the outer backward.
    out = torch.utils.checkpoint.checkpoint(model, x, use_reentrant=True)
    out.sum().backward()
    assert events(read_markers(tmp_path))[2:] == [
        ("phase_begin:backward", 0),
        ("phase_end:backward", 0),
    ]


def test_off_the_runner_runs_the_script_without_torch_or_files(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text("import sys\nprint('torch' in sys.modules)\n")
    done = subprocess.run(
        [sys.executable, *RUNNER, "show.py"],
        cwd=tmp_path,
        env=python_env(None),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["show.py"]


def run_script(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` as tmp_path/train.py, run by the runner there with markers into run/."""
    (tmp_path / "train.py").write_text(script)
    return subprocess.run(
        [sys.executable, *RUNNER, "train.py", *args],
        cwd=tmp_path,
        env=python_env(tmp_path / "run"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_exception_passes_through_with_the_hooks_on(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, torch
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        if sys.argv[1] == "raise":
            raise ValueError("diverged")
        sys.exit(int(sys.argv[1]))
        """
    )
    # (Statuses other than 1 pass through the same code: test_script_runner.py.)
    crashed = run_script(tmp_path, script, "raise")
    assert crashed.returncode == 1
    assert crashed.stderr == (  # as `python train.py raise` prints it: no frame of rtk's
        "Traceback (most recent call last):\n"
        f'  File "{tmp_path / "train.py"}", line 8, in <module>\n'
        '    raise ValueError("diverged")\n'
        "ValueError: diverged\n"
    )
    # The step, and run_end at exit, although the script ended with an exception.
    ends = [m for m in read_markers(tmp_path / "run") if m.event in ("step_end", "run_end")]
    assert [(m.event, m.step) for m in ends] == [("step_end", 0), ("run_end", 0)]


def test_a_distributed_script_ends_as_python_would_without_finalizing(tmp_path: Path) -> None:
    """The runner's own ending (``script_runner.exit_without_finalizing``) once torch.distributed
    is imported: its status, threads waited for, atexit handlers run, buffered output and
    files left open written out."""
    script = textwrap.dedent(
        """
        import atexit, sys, threading
        from pathlib import Path
        import torch.distributed
        atexit.register(print, "atexit ran")
        threading.Thread(target=lambda: Path("thread-done").touch()).start()
        left_open = open("left-open.txt", "w")
        left_open.write("never closed")
        print("buffered, never flushed")
        sys.exit(int(sys.argv[1]))
        """
    )
    done = run_script(tmp_path, script, "3")
    assert (done.returncode, done.stdout) == (3, "buffered, never flushed\natexit ran\n"), done
    assert (tmp_path / "thread-done").exists()
    assert (tmp_path / "left-open.txt").read_text() == "never closed"


def test_without_a_script_it_says_how_to_call_it() -> None:
    done = subprocess.run(
        [sys.executable, *RUNNER],
        env=python_env(None),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (2, auto_steps.USAGE + "\n")
