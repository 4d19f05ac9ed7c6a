"""The public calls: what they write under rtk, that they do nothing (and create
nothing) without it, what they refuse, and what importing them loads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from marker_ranks import by_rank, ended_well, events, python_env, run_ranks

from toolkit import markers
from toolkit.markers import api, recorder
from toolkit.rundir import markers as rundir_markers
from toolkit.rundir import read_markers


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """Markers on for this test, writing to ``tmp_path/run``; off again after."""
    recorder.reset({"RTK_RUN_DIR": str(tmp_path / "run")})
    try:
        yield tmp_path / "run"
    finally:
        recorder.reset({})


def test_steps_phases_barriers_and_own_events_are_written(run_dir: Path) -> None:
    assert markers.enabled()
    with markers.step(tokens=4096, samples=8):
        with markers.phase("forward"):
            pass
        markers.begin_phase("backward")
        markers.end_phase("backward")
    markers.barrier()  # no process group here: recorded, nothing to wait for
    markers.mark("lr_drop", lr=1e-4, reason="plateau")
    markers.begin_step()
    markers.end_step(tokens=10, loss=2.5)
    found = read_markers(run_dir)
    assert events(found) == [
        ("run_start", None),
        ("step_begin", 0),
        ("phase_begin:forward", 0),
        ("phase_end:forward", 0),
        ("phase_begin:backward", 0),
        ("phase_end:backward", 0),
        ("step_end", 0),
        ("barrier", 0),
        ("lr_drop", 0),
        ("step_begin", 1),
        ("step_end", 1),
    ]
    assert found[0].fields == {"steps_from": "api"}
    assert found[6].fields == {"tokens": 4096, "samples": 8}
    assert found[7].fields["group"] is None and 0 <= float(str(found[7].fields["wait_s"])) < 1
    assert found[8].fields == {"lr": 1e-4, "reason": "plateau"}
    assert found[10].fields == {"tokens": 10, "loss": 2.5}


def test_a_step_that_raises_still_ends(run_dir: Path) -> None:
    with pytest.raises(RuntimeError), markers.step(5):
        raise RuntimeError("out of memory")
    assert events(read_markers(run_dir))[-2:] == [("step_begin", 5), ("step_end", 5)]


def test_steps_from_is_written_when_set_first(run_dir: Path) -> None:
    markers.set_steps_from("hf")
    markers.end_step(tokens=3)
    markers.set_steps_from("lightning")  # after the first marker: ignored
    assert read_markers(run_dir)[0].fields == {"steps_from": "hf"}


@pytest.mark.parametrize("on", [False, True])
def test_refusals_are_the_same_on_and_off(on: bool, tmp_path: Path) -> None:
    recorder.reset({"RTK_RUN_DIR": str(tmp_path)} if on else {})
    try:
        for reserved in sorted(api.RESERVED_EVENTS):
            with pytest.raises(ValueError, match="one of rtk's own events"):
                markers.mark(reserved)
        with pytest.raises(ValueError, match="step is a key every record has"):
            markers.mark("mine", step=3)
        with pytest.raises(TypeError, match="object is not JSON"):
            markers.mark("mine", thing=object())  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="expected one of"):
            markers.set_steps_from("keras")
    finally:
        recorder.reset({})
    assert not (tmp_path / "markers").exists()


def test_the_reserved_keys_are_the_records_own() -> None:
    assert set(rundir_markers._BASE) == api.RECORD_KEYS


def test_off_every_call_is_a_no_op() -> None:
    recorder.reset({})
    assert not markers.enabled()
    with markers.step(), markers.phase("forward"):
        markers.begin_step(3)
        markers.end_step(tokens=1)
        markers.begin_phase("x")
        markers.end_phase("x")
        markers.mark("mine", a=1)
        markers.barrier()
        markers.set_steps_from("auto")
    assert recorder.active is None


# argv: how long rank 1 arrives at each barrier after rank 0 is inside it.
API_SCRIPT = """
import sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from toolkit import markers

late_s = float(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(4, 1)  # no DDP: it imports torch._dynamo, seconds a rank here
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
dist.barrier()  # the ranks start together (their imports take different times)
if rank == 0:
    # markers.barrier calls torch.distributed.barrier once it has taken rank 0's
    # arrival: say then, in a file, that rank 0 is inside barrier N.
    real_barrier, entered = dist.barrier, []
    def barrier(group=None):
        entered.append(1)
        Path(f"rank0-in-barrier-{len(entered)}").touch()
        real_barrier(group)
    dist.barrier = barrier
for step in range(2):
    with markers.step(tokens=16):
        with markers.phase("forward"):
            loss = model(torch.ones(2, 4)).sum()
        with markers.phase("backward"):
            loss.backward()
        optimizer.step()
    if rank == 1:  # arrive once rank 0 is waiting, and late_s after
        give_up = time.monotonic() + 60
        while not Path(f"rank0-in-barrier-{step + 1}").exists():
            assert time.monotonic() < give_up, "rank 0 never reached the barrier"
            time.sleep(0.01)
        time.sleep(late_s)
    markers.barrier()
dist.destroy_process_group()
print("enabled", markers.enabled())
"""


def test_two_ranks_with_steps_phases_and_barriers(tmp_path: Path) -> None:
    """Both ranks' records; rank 1 arrives last at every barrier, by construction.

    Rank 1 arrives only after rank 0 is inside the barrier (a file says so) and
    ``late_s`` more, so rank 0 waits longer than ``late_s`` whatever the load; rank 1,
    arriving last, waits the least (how close its wait is to zero is the machine's).
    """
    (tmp_path / "train.py").write_text(API_SCRIPT)
    late_s = 0.5
    ranks = run_ranks(["train.py", str(late_s)], 2, tmp_path / "run", tmp_path)
    assert all(ended_well(r) for r in ranks), [(r.returncode, r.stderr) for r in ranks]
    assert all(r.stdout == "enabled True\n" for r in ranks)
    found = by_rank(tmp_path / "run")
    assert sorted(found) == [0, 1]
    one_step = ["step_begin", "phase_begin:forward", "phase_end:forward"]
    one_step += ["phase_begin:backward", "phase_end:backward", "step_end", "barrier"]
    for rank, written in found.items():
        assert events(written) == [
            ("run_start", None),
            *[(event, step) for step in range(2) for event in one_step],
            ("run_end", 1),
        ], rank
        assert {m.world_size for m in written} == {2}
        assert [m.fields["tokens"] for m in written if m.event == "step_end"] == [16, 16]
        assert all(m.fields["group"] is None for m in written if m.event == "barrier")
    barriers = {
        rank: [m for m in written if m.event == "barrier"] for rank, written in found.items()
    }
    for at_0, at_1 in zip(barriers[0], barriers[1], strict=True):
        wait_0, wait_1 = float(str(at_0.fields["wait_s"])), float(str(at_1.fields["wait_s"]))
        assert wait_0 > late_s, (wait_0, late_s)  # rank 0 waited for rank 1 ...
        assert wait_1 < wait_0  # ... which, arriving last, waited the least
        # On the node's one monotonic clock, rank 1 arrived (written less waited) last.
        assert at_1.mono_s - wait_1 > at_0.mono_s - wait_0


def test_off_writes_nothing_and_creates_no_folder(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from toolkit import markers
        with markers.step(tokens=1):
            with markers.phase("forward"):
                markers.mark("mine", a=1)
        markers.barrier()
        print(markers.enabled())
        """
    )
    (tmp_path / "train.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        env=python_env(None),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_importing_loads_only_the_standard_library_until_a_write(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        at_start = set(sys.modules)  # the interpreter's own, and site's (.pth files)
        def loaded():
            return sorted(
                name for name in set(sys.modules) - at_start
                if name.split(".")[0] not in sys.stdlib_module_names
            )
        from toolkit import markers
        print(loaded())
        with markers.step():
            pass
        print("toolkit.rundir.markers" in loaded(), [n for n in loaded() if n[:8] != "toolkit."])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=python_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.splitlines()
    assert before == str(
        [
            "toolkit",
            "toolkit.markers",
            "toolkit.markers.api",
            "toolkit.markers.identity",
            "toolkit.markers.recorder",
        ]
    )
    assert after == "True ['toolkit']"  # the writer came with the first write, rtk's only
