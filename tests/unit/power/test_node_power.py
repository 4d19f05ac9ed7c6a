"""One node's side of the power policies: set limits, read energy, put back (NVML fake).

Also the fake's energy model these tests and the sandbox rely on: a GPU with a
``draw_w`` counts energy by the wall clock at its draw or its limit, whichever is lower.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml, from_state_file
from pynvml import NVML_ERROR_DRIVER_NOT_LOADED

from toolkit.cluster.plan import build_plan
from toolkit.gpu.limits import GpuRestore
from toolkit.gpu.limits_over_ssh import restore_file
from toolkit.inventory import default_inventory
from toolkit.node import gpu_control
from toolkit.node.common import GPU_RESTORE_FILE
from toolkit.power.node_power import (
    GpuReading,
    NodePower,
    default_restore_file,
    node_power,
    node_restore,
)

FAKE_FILE = REPO / "tests" / "fake_nvml.py"
RUN = "raysubmit_run1"


def gpu(index: int, **kwargs: Any) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{index:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f", **kwargs)


def limits_mw(fake: FakeNvml) -> list[int]:
    return [g.power_limit_mw for g in fake.fake_gpus]


@pytest.fixture
def record(tmp_path: Path) -> str:
    return str(tmp_path / "rtk" / "gpu-restore.json")


# -- node_power -----------------------------------------------------------------------------


def test_it_sets_then_reads_every_gpu(record: str) -> None:
    fake = FakeNvml([gpu(0, energy_mj=1_000), gpu(1, energy_mj=2_000)])
    answer = node_power("n1", RUN, {1: 450}, record, fake)
    assert isinstance(answer, NodePower)
    assert (answer.node, answer.nvml, answer.errors) == ("n1", True, ())
    assert answer.gpus == (
        GpuReading(0, gpu(0).uuid, 1_000, 700.0, 200.0, 700.0, 700.0),
        GpuReading(1, gpu(1).uuid, 2_000, 450.0, 200.0, 700.0, 700.0),
    )
    assert answer.wall_s > 0
    assert json.loads(Path(record).read_text())["owner"] == RUN
    assert (fake.fake_count("nvmlInit"), fake.fake_init_count) == (3, 0)  # all shut down


def test_no_limits_only_reads_and_writes_no_file(record: str) -> None:
    fake = FakeNvml([gpu(0)])
    for limits in (None, {}):
        answer = node_power("n1", RUN, limits, record, fake)
        assert answer.nvml and len(answer.gpus) == 1 and answer.errors == ()
    assert not Path(record).parent.exists()
    assert fake.fake_count("nvmlDeviceSetPowerManagementLimit") == 0


def test_refusals_are_lines_and_the_gpus_are_read_all_the_same(record: str) -> None:
    fake = FakeNvml([gpu(0), gpu(1)], root=False)
    answer = node_power("n1", RUN, {0: 400, 1: 400}, record, fake)
    assert answer.errors == (
        "setting the power limit needs root on n1 (nvidia-smi -pl needs it too); run rtk as"
        " root or drop --power-policy",
    )  # the same line for every GPU, once
    assert [g.limit_w for g in answer.gpus] == [700.0, 700.0]

    fake.fake_root = True
    node_power("n1", "raysubmit_old", {0: 300}, record, fake)
    answer = node_power("n1", RUN, {0: 400, 1: 999}, record, fake)
    assert len(answer.errors) == 1 and "still in place on n1" in answer.errors[0]
    assert [g.limit_w for g in answer.gpus] == [300.0, 700.0]


@pytest.mark.parametrize("how", ["no driver", "no pynvml"])
def test_a_node_without_nvml_answers_so(
    record: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake: Any = None
    if how == "no driver":
        fake = FakeNvml([gpu(0)], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    else:

        def missing() -> Any:
            raise gpu_control.ControlError("pynvml (nvidia-ml-py) does not import: no module")

        monkeypatch.setattr(gpu_control, "load_nvml", missing)
    answer = node_power("n1", RUN, {0: 400}, record, fake)
    assert (answer.nvml, answer.gpus) == (False, ())
    assert len(answer.errors) == 1
    assert ("NVML does not start on n1" if fake else "does not import") in answer.errors[0]
    assert not Path(record).parent.exists()


def test_the_restore_file_is_under_the_cluster_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTK_CLUSTER_DIR", str(tmp_path))
    assert default_restore_file() == str(tmp_path / "rtk" / "gpu-restore.json")
    node_power("n1", RUN, {0: 400}, nvml=FakeNvml([gpu(0)]))
    assert (tmp_path / "rtk" / "gpu-restore.json").is_file()
    monkeypatch.delenv("RTK_CLUSTER_DIR")
    monkeypatch.setitem(sys.modules, "ray", None)  # no Ray: the system's temp dir
    (tmp_path / "sys").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "sys"))
    monkeypatch.setattr("tempfile.tempdir", None)
    assert default_restore_file() == str(tmp_path / "sys" / "rtk" / "gpu-restore.json")


def test_the_restore_file_is_the_one_rtk_profile_restore_repairs() -> None:
    plan = build_plan(default_inventory())
    assert restore_file(plan) == f"{plan.paths.temp_dir}/{GPU_RESTORE_FILE}"


# -- node_restore ---------------------------------------------------------------------------


def test_node_restore_puts_back_what_the_run_set(record: str) -> None:
    fake = FakeNvml([gpu(0, power_limit_mw=650_000), gpu(1)])
    node_power("n1", RUN, {0: 300}, record, fake)
    node_power("n1", RUN, {1: 400}, record, fake)
    assert limits_mw(fake) == [300_000, 400_000]
    assert node_restore("n1", record, fake) == GpuRestore(
        "n1",
        done=(
            f"n1: put back the power limit of GPU {gpu(0).uuid}",
            f"n1: put back the power limit of GPU {gpu(1).uuid}",
        ),
    )
    assert limits_mw(fake) == [650_000, 700_000] and not Path(record).exists()
    assert node_restore("n1", record, fake) == GpuRestore("n1")  # nothing left to do


def test_node_restore_without_a_file_needs_no_nvml(
    record: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never() -> Any:
        raise AssertionError("NVML loaded with nothing to restore")

    monkeypatch.setattr(gpu_control, "load_nvml", never)
    assert node_restore("n1", record) == GpuRestore("n1")


def test_node_restore_goes_on_past_a_failing_gpu_and_keeps_the_file(record: str) -> None:
    fake = FakeNvml([gpu(0), gpu(1)])
    node_power("n1", RUN, {0: 300, 1: 300}, record, fake)
    fake.fake_gpus[0].errors["nvmlDeviceSetPowerManagementLimit"] = 999  # NVML_ERROR_UNKNOWN
    done = node_restore("n1", record, fake)
    assert done.done == (f"n1: put back the power limit of GPU {gpu(1).uuid}",)
    assert done.failed is not None and done.left is None
    assert done.failed.startswith(f"n1: could not put back every GPU setting on n1 ({gpu(0).uuid}")
    assert done.failed.endswith("is kept: retry with `rtk profile --restore`")
    assert done.lines == (*done.done, done.failed) and Path(record).exists()
    assert limits_mw(fake) == [300_000, 700_000]


# -- the fake's energy by the wall clock ---------------------------------------------------


class Clock:
    def __init__(self, now_s: float = 1_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def clocked(*gpus: FakeGpu) -> tuple[FakeNvml, Clock]:
    fake = FakeNvml(gpus)
    clock = Clock()
    fake.fake_wall_s, fake.fake_stamp_s = clock, clock.now_s
    fake.nvmlInit()
    return fake, clock


def energy(fake: FakeNvml, index: int) -> int:
    return int(fake.nvmlDeviceGetTotalEnergyConsumption(fake.nvmlDeviceGetHandleByIndex(index)))


def test_a_drawing_gpu_counts_at_its_draw_or_its_limit_whichever_is_lower() -> None:
    fake, clock = clocked(gpu(0, draw_w=500, energy_mj=0), gpu(1, energy_mj=42))
    clock.now_s += 10
    assert energy(fake, 0) == 5_000_000  # 500 W for 10 s, under its 700 W limit
    assert energy(fake, 1) == 42  # no draw_w: the counter stays as it was
    fake.nvmlDeviceSetPowerManagementLimit(fake.nvmlDeviceGetHandleByIndex(0), 300_000)
    assert energy(fake, 0) == 5_000_000  # folded in at the old draw, never back
    clock.now_s += 10
    assert energy(fake, 0) == 8_000_000  # then 300 W, its limit
    fake.nvmlDeviceSetPowerManagementLimit(fake.nvmlDeviceGetHandleByIndex(0), 700_000)
    clock.now_s += 1
    assert energy(fake, 0) == 8_500_000
    clock.now_s -= 5  # the wall clock stepped back: the counter does not
    assert energy(fake, 0) >= 8_000_000


def test_the_state_file_carries_the_energy_and_its_stamp(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    fake, clock = clocked(gpu(0, draw_w=400, energy_mj=0))
    fake.fake_state_file = state
    clock.now_s += 5
    fake.nvmlDeviceSetPowerManagementLimit(fake.nvmlDeviceGetHandleByIndex(0), 250_000)
    later = from_state_file(state)  # another process, later
    later.fake_wall_s = lambda: clock.now_s + 4
    later.nvmlInit()
    assert later.fake_gpus[0].power_limit_mw == 250_000
    assert energy(later, 0) == 2_000_000 + 1_000_000  # 400 W for 5 s, then 250 W for 4 s


def test_node_power_sees_energy_that_depends_on_the_limit_in_state_file_mode(
    tmp_path: Path, record: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a sandbox node does: the fake from RTK_FAKE_NVML, a new one per call."""
    state = tmp_path / f"fake-nvml-{socket.gethostname()}.json"
    FakeNvml([gpu(0, draw_w=500, energy_mj=0)]).fake_save(state)
    monkeypatch.setenv("RTK_FAKE_NVML", f"{FAKE_FILE}:from_state_file")
    monkeypatch.setenv("FAKE_NVML_STATE", str(tmp_path / "fake-nvml-{host}.json"))

    def back_date(seconds: float) -> None:  # as if that much time had passed since
        data = json.loads(state.read_text())
        data["stamp_s"] -= seconds
        state.write_text(json.dumps(data))

    back_date(100)
    first = node_power("n1", RUN, {0: 300}, record)
    assert first.errors == () and first.gpus[0].limit_w == 300.0
    at_300 = first.gpus[0].energy_mj
    assert at_300 is not None and at_300 >= 100 * 500_000  # 100 s at 500 W, then set
    back_date(100)
    second = node_power("n1", RUN, None, record)
    assert second.gpus[0].energy_mj is not None
    # 100 s more at 300 W (the limit), not at the 500 W it would draw
    assert 100 * 300_000 <= second.gpus[0].energy_mj - at_300 < 100 * 500_000
    assert node_restore("n1", record).done == (
        f"n1: put back the power limit of GPU {gpu(0).uuid}",
    )
    assert from_state_file(state).fake_gpus[0].power_limit_mw == 700_000


def test_node_restore_of_a_run_leaves_another_owners_file(record: str) -> None:
    fake = FakeNvml([gpu(0)])
    node_power("n1", "raysubmit_other", {0: 300}, record, fake)
    refused = node_power("n1", RUN, {0: 400}, record, fake)
    assert refused.errors and refused.gpus[0].limit_w == 300.0
    assert node_restore("n1", record, fake, owner=RUN) == GpuRestore(
        "n1", left=f"n1: left {record} as it is: raysubmit_other wrote it"
    )
    assert limits_mw(fake) == [300_000] and Path(record).exists()
    assert node_restore("n1", record, fake, owner="raysubmit_other") == GpuRestore(
        "n1", done=(f"n1: put back the power limit of GPU {gpu(0).uuid}",)
    )
    assert limits_mw(fake) == [700_000]
    assert node_restore("n1", record, fake, owner=RUN) == GpuRestore("n1")
