"""Power limits per GPU, set again and again by one run (``set_power_limits``), and read.

On the NVML fake in this process, and once through the node script on stdin in a new
process (the fake from ``RTK_FAKE_NVML``, its GPUs in ``FAKE_NVML_STATE``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml, from_state_file

from toolkit.gpu.limits_over_ssh import control_source
from toolkit.node import gpu_control as control
from toolkit.node.gpu_control import (
    ControlError,
    apply,
    read_power,
    restore,
    set_power_limits,
)

FAKE_FILE = REPO / "tests" / "fake_nvml.py"
RUN = "raysubmit_run1"


def gpu(index: int, **kwargs: Any) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{index:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f", **kwargs)


def gpus(count: int = 4, **kwargs: Any) -> list[FakeGpu]:
    return [gpu(i, **kwargs) for i in range(count)]


def limits_mw(fake: FakeNvml) -> list[int]:
    return [g.power_limit_mw for g in fake.fake_gpus]


@pytest.fixture
def record(tmp_path: Path) -> str:
    return str(tmp_path / "rtk" / "gpu-restore.json")


def test_the_first_call_records_every_gpu_and_later_calls_only_set(record: str) -> None:
    fake = FakeNvml(gpus(4, power_limit_mw=650_000))
    first = set_power_limits(fake, {0: 400, 2: 500.5}, record, RUN, node="n1")
    assert first == {
        "node": "n1",
        "restore_file": record,
        "owner": RUN,
        "set": {0: 400.0, 2: 500.5},
        "errors": {},
        "recorded": True,
    }
    assert limits_mw(fake) == [400_000, 650_000, 500_500, 650_000]
    written = json.loads(Path(record).read_text())
    assert written["owner"] == RUN and written["node"] == "n1" and written["version"] == 1
    assert written["gpus"] == {
        gpu(i).uuid: {"index": i, "changes": ["power_limit"], "power_limit_mw": 650_000}
        for i in range(4)
    }  # every GPU, the ones not asked yet too: a later call may set them

    later = set_power_limits(fake, {1: 300, 2: 600}, record, RUN, node="n1")
    assert later["set"] == {1: 300.0, 2: 600.0} and later["recorded"] is False
    assert limits_mw(fake) == [400_000, 300_000, 600_000, 650_000]
    assert json.loads(Path(record).read_text()) == written  # what to put back is unchanged

    done = restore(fake, record, node="n1")
    assert done["errors"] == {} and not Path(record).exists()
    assert limits_mw(fake) == [650_000] * 4


def test_nothing_asked_touches_nothing(record: str) -> None:
    fake = FakeNvml(gpus(2))
    done = set_power_limits(fake, {}, record, RUN, node="n1")
    assert done["set"] == {} and done["recorded"] is False
    assert not Path(record).exists() and sum(fake.fake_calls.values()) == 0


@pytest.mark.parametrize("earlier", ["another run", "rtk profile"])
def test_a_restore_file_of_another_owner_is_refused(record: str, earlier: str) -> None:
    fake = FakeNvml(gpus(2))
    if earlier == "rtk profile":
        apply(fake, 500, None, None, record, node="n1")  # its record has no owner
    else:
        set_power_limits(fake, {0: 500, 1: 500}, record, "raysubmit_old", node="n1")
    before = Path(record).read_text()
    with pytest.raises(ControlError) as refused:
        set_power_limits(fake, {0: 300}, record, RUN, node="n1")
    assert str(refused.value) == (
        f"GPU settings of an earlier run are still in place on n1 ({record}): put them back"
        " with `rtk profile --restore` (or `rtk down`, then `rtk up`)"
    )
    assert limits_mw(fake) == [500_000, 500_000] and Path(record).read_text() == before


def test_a_limit_out_of_range_is_refused_for_its_gpu_and_the_others_are_set(record: str) -> None:
    fake = FakeNvml(gpus(3))
    done = set_power_limits(fake, {0: 150, 1: 450, 2: 701, 7: 400}, record, RUN, node="n1")
    assert done["set"] == {1: 450.0}
    assert done["errors"] == {
        0: f"power limit 150 W is outside the range of GPU 0 ({gpu(0).uuid}) on n1: 200..700 W;"
        " not set",
        2: f"power limit 701 W is outside the range of GPU 2 ({gpu(2).uuid}) on n1: 200..700 W;"
        " not set",
        7: "n1 has no GPU 7 (NVML sees 3)",
    }
    assert limits_mw(fake) == [700_000, 450_000, 700_000]


def test_not_root_every_gpu_says_so_and_no_restore_file_stays(record: str) -> None:
    fake = FakeNvml(gpus(2), root=False)
    done = set_power_limits(fake, {0: 400, 1: 400}, record, RUN, node="n1")
    line = (
        "setting the power limit needs root on n1 (nvidia-smi -pl needs it too); run rtk as"
        " root or drop --power-policy"
    )
    assert done["set"] == {} and done["errors"] == {0: line, 1: line}
    assert done["recorded"] is False and not Path(record).exists()  # nothing to put back
    assert limits_mw(fake) == [700_000, 700_000]


def test_a_gpu_without_a_settable_limit_is_one_line_and_the_others_are_set(record: str) -> None:
    odd = gpu(1)
    odd.unsupported.add("nvmlDeviceGetPowerManagementLimitConstraints")
    fake = FakeNvml([gpu(0), odd])
    done = set_power_limits(fake, {0: 400, 1: 400}, record, RUN, node="n1")
    assert done["set"] == {0: 400.0}
    assert done["errors"][1].startswith(
        f"GPU 1 ({odd.uuid}) on n1 does not support setting the power limit ("
    )
    assert done["errors"][1].endswith("); drop --power-policy")
    restore(fake, record)
    assert limits_mw(fake) == [700_000, 700_000]


def test_read_power() -> None:
    odd = gpu(1, energy_mj=7, power_limit_mw=450_000)
    odd.unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    fake = FakeNvml([gpu(0, energy_mj=123_456), odd])
    assert read_power(fake, node="n1") == {
        "node": "n1",
        "gpus": [
            {
                "index": 0,
                "uuid": gpu(0).uuid,
                "energy_mj": 123_456,
                "limit_w": 700.0,
                "min_w": 200.0,
                "max_w": 700.0,
                "default_w": 700.0,
            },
            {
                "index": 1,
                "uuid": odd.uuid,
                "energy_mj": None,
                "limit_w": 450.0,
                "min_w": 200.0,
                "max_w": 700.0,
                "default_w": 700.0,
            },
        ],
    }
    assert fake.fake_init_count == 0  # NVML shut down again


def test_main_set_limits(capsys: pytest.CaptureFixture[str], record: str) -> None:
    fake = FakeNvml(gpus(2))
    argv = ["set-limits", "--node", "n1", "--restore-file", record, "--owner", RUN]
    code = control.main([*argv, "--limits", "0=450,1=512.5"], fake)
    answer = json.loads(capsys.readouterr().out)
    assert code == 0 and answer["ok"] is True and answer["command"] == "set-limits"
    assert answer["result"]["set"] == {"0": 450.0, "1": 512.5}
    assert limits_mw(fake) == [450_000, 512_500]

    code = control.main([*argv, "--limits", "0=fast"], fake)
    answer = json.loads(capsys.readouterr().out)
    assert code == 2 and "'0=fast' is not INDEX=WATTS" in answer["error"]
    code = control.main(argv, fake)
    answer = json.loads(capsys.readouterr().out)
    assert (code, answer["error"]) == (
        2,
        "usage: set-limits needs --owner and --limits INDEX=W,...",
    )


def test_the_script_sets_limits_and_a_new_process_restores(tmp_path: Path, record: str) -> None:
    state = tmp_path / "state.json"
    FakeNvml(gpus(2, power_limit_mw=600_000)).fake_save(state)
    env = {
        **os.environ,
        "RTK_FAKE_NVML": f"{FAKE_FILE}:from_state_file",
        "FAKE_NVML_STATE": str(state),
    }

    def script(*argv: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-", *argv, "--node", "n1", "--restore-file", record],
            input=control_source(),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    script("set-limits", "--owner", RUN, "--limits", "0=300,1=400")
    script("set-limits", "--owner", RUN, "--limits", "1=350")
    assert limits_mw(from_state_file(state)) == [300_000, 350_000]
    script("restore")
    assert limits_mw(from_state_file(state)) == [600_000, 600_000]
    assert not Path(record).exists()
