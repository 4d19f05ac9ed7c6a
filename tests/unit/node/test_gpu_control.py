"""GPU power limits and locked clocks: apply, refuse, restore (on the NVML fake, and a GPU).

The node script's JSON contract is tested two ways: ``main(argv, fake)`` in this process,
and ``python -`` with the script on stdin in a subprocess, where the fake comes in through
``RTK_FAKE_NVML=<tests/fake_nvml.py>:from_state_file`` (honoured only under pytest) and
keeps its GPUs in the JSON file named by ``FAKE_NVML_STATE`` (so a later process, such
as a restore after a crash, sees what an earlier one set).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml, from_state_file

from toolkit.gpu.limits_over_ssh import (
    control_source,
)
from toolkit.node import gpu_control as control
from toolkit.node.gpu_control import ControlError, apply, read_settings, restore

FAKE_FILE = REPO / "tests" / "fake_nvml.py"


def gpu(index: int, **kwargs: Any) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{index:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f", **kwargs)


def gpus(count: int = 4, **kwargs: Any) -> list[FakeGpu]:
    return [gpu(i, **kwargs) for i in range(count)]


SETTERS = (
    "nvmlDeviceSetPowerManagementLimit",
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceSetMemoryLockedClocks",
)
UNTOUCHED = [(700_000, None, None)] * 4


def setter_calls(fake: FakeNvml) -> int:
    return sum(fake.fake_count(name) for name in SETTERS)


@pytest.fixture
def record(tmp_path: Path) -> str:
    return str(tmp_path / "rtk" / "gpu-restore.json")


# -- read, apply, restore -----------------------------------------------------------------


def test_read_settings() -> None:
    fake = FakeNvml([gpu(0, power_limit_mw=650_000, persistence_mode=False)])
    settings = read_settings(fake, node="n1")
    assert settings == {
        "node": "n1",
        "gpus": {
            gpu(0).uuid: {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "power_limit_w": 650.0,
                "default_power_limit_w": 700.0,
                "enforced_power_limit_w": 650.0,
                "power_limit_min_w": 200.0,
                "power_limit_max_w": 700.0,
                "sm_clock_mhz": 1980,
                "mem_clock_mhz": 2619,
                "max_sm_clock_mhz": 1980,
                "max_mem_clock_mhz": 2619,
                "clocks_event_reasons": 0,
                "persistence_mode": False,
            }
        },
    }
    assert fake.fake_init_count == 0  # shut down again


def test_read_leaves_out_what_the_gpu_does_not_support() -> None:
    unsupported = {"nvmlDeviceGetPowerManagementLimitConstraints", "nvmlDeviceGetMaxClockInfo"}
    fake = FakeNvml([gpu(0, unsupported=unsupported)])
    row = read_settings(fake)["gpus"][gpu(0).uuid]
    assert row["power_limit_min_w"] is None and row["max_sm_clock_mhz"] is None
    assert row["power_limit_w"] == 700.0


def test_apply_then_restore_leaves_the_gpus_as_before(record: str) -> None:
    fake = FakeNvml(gpus(4, power_limit_mw=650_000))
    before = fake.fake_settings()
    applied = apply(fake, 500, (1200, 1500), (1593, 1593), record, node="n1")
    assert fake.fake_settings() == [(500_000, (1200, 1500), (1593, 1593))] * 4
    assert applied["gpus"][gpu(3).uuid] == {
        "index": 3,
        "power_limit_w": 500.0,
        "previous_power_limit_w": 650.0,
        "gpu_clocks_mhz": [1200, 1500],
        "mem_clocks_mhz": [1593, 1593],
    }
    assert applied["warnings"] == []
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600
    saved = json.loads(Path(record).read_text())
    assert saved["gpus"][gpu(0).uuid] == {
        "index": 0,
        "changes": ["power_limit", "gpu_clocks", "mem_clocks"],
        "power_limit_mw": 650_000,
    }
    assert read_settings(fake, record)["gpus"][gpu(1).uuid]["sm_clock_mhz"] == 1500
    assert read_settings(fake, record)["gpus"][gpu(1).uuid]["pending_restore"] == [
        "power_limit",
        "gpu_clocks",
        "mem_clocks",
    ]

    restored = restore(fake, record, node="n1")
    assert fake.fake_settings() == before
    assert restored["errors"] == {}
    assert restored["gpus"][gpu(2).uuid] == {
        "power_limit": "restored",
        "gpu_clocks": "restored",
        "mem_clocks": "restored",
    }
    assert not Path(record).exists()
    assert fake.fake_init_count == 0


def test_only_what_was_asked_is_changed_and_put_back(record: str) -> None:
    fake = FakeNvml(gpus(2))
    apply(fake, None, (1000, 1000), None, record)
    assert fake.fake_settings() == [(700_000, (1000, 1000), None)] * 2
    restore(fake, record)
    assert fake.fake_count("nvmlDeviceSetPowerManagementLimit") == 0
    assert fake.fake_count("nvmlDeviceResetMemoryLockedClocks") == 0
    assert fake.fake_settings() == [(700_000, None, None)] * 2


def test_nothing_asked_changes_nothing(record: str) -> None:
    fake = FakeNvml(gpus(2))
    assert apply(fake, None, None, None, record)["gpus"] == {}
    assert fake.fake_count("nvmlInit") == 0 and not Path(record).exists()


def test_an_out_of_range_limit_is_refused_before_anything_changes(record: str) -> None:
    fake = FakeNvml([*gpus(3), gpu(3, power_limit_min_mw=400_000)])
    with pytest.raises(ControlError) as caught:
        apply(fake, 300, (1200, 1500), None, record, node="n1")
    assert str(caught.value) == (
        f"power_limit_w=300 is outside the range of GPU 3 ({gpu(3).uuid}) on n1: 400..700 W"
    )
    assert setter_calls(fake) == 0
    assert fake.fake_settings() == UNTOUCHED
    assert not Path(record).exists()


@pytest.mark.parametrize(
    ("clocks", "message"),
    [
        ((1500, 1200), "gpu_clocks_mhz=[1500, 1200] on n1: give MIN,MAX with 0 < MIN <= MAX"),
        ((1200, 2100), "gpu_clocks_mhz=[1200, 2100] is above the maximum of GPU 0"),
    ],
)
def test_bad_clocks_are_refused_before_anything_changes(
    record: str, clocks: tuple[int, int], message: str
) -> None:
    fake = FakeNvml(gpus(2))
    with pytest.raises(ControlError, match=message.replace("[", r"\[").replace("]", r"\]")):
        apply(fake, 500, clocks, None, record, node="n1")
    assert setter_calls(fake) == 0 and not Path(record).exists()


def test_no_settable_power_limit_is_refused_before_anything_changes(record: str) -> None:
    fake = FakeNvml([gpu(0), gpu(1, unsupported={"nvmlDeviceGetPowerManagementLimitConstraints"})])
    with pytest.raises(ControlError, match="GPU 1 .* on n1 has no settable power limit"):
        apply(fake, 500, None, None, record, node="n1")
    assert setter_calls(fake) == 0


def test_not_root_nothing_stays_changed_and_the_message_says_why(record: str) -> None:
    fake = FakeNvml(gpus(4), root=False)
    with pytest.raises(ControlError) as caught:
        apply(fake, 500, (1200, 1500), None, record, node="n1")
    assert str(caught.value) == (
        "setting the power limit needs root on n1 (nvidia-smi -pl needs it too);"
        " run rtk as root or drop power_limit_w from the sweep"
    )
    assert isinstance(caught.value.__cause__, pynvml.NVMLError_NoPermission)
    assert fake.fake_settings() == UNTOUCHED
    assert not Path(record).exists()


def test_no_permission_for_clocks_puts_the_limit_back(record: str) -> None:
    fake = FakeNvml([gpu(0, no_permission={"nvmlDeviceSetGpuLockedClocks"}), gpu(1)])
    with pytest.raises(ControlError, match=r"locking the GPU clocks needs root on n1 \(nvidia-smi"):
        apply(fake, 500, (1200, 1500), None, record, node="n1")
    assert fake.fake_count("nvmlDeviceSetPowerManagementLimit", gpu(0).uuid) == 2  # set, back
    assert fake.fake_settings() == [(700_000, None, None)] * 2
    assert not Path(record).exists()


def test_a_failure_on_gpu_2_of_4_puts_gpus_0_and_1_back(record: str) -> None:
    fake = FakeNvml(
        [gpu(0), gpu(1), gpu(2, unsupported={"nvmlDeviceSetMemoryLockedClocks"}), gpu(3)]
    )
    with pytest.raises(ControlError) as caught:
        apply(fake, 450, (1200, 1500), (1593, 1593), record, node="n1")
    assert str(caught.value).startswith(
        f"GPU 2 ({gpu(2).uuid}) on n1 does not support locking the memory clocks"
    )
    assert str(caught.value).endswith("drop mem_clocks_mhz from the sweep")
    assert fake.fake_settings() == UNTOUCHED
    restored = caught.value.result["restored"]
    assert restored["gpus"] == {
        gpu(2).uuid: ["gpu_clocks", "power_limit"],
        gpu(1).uuid: ["mem_clocks", "gpu_clocks", "power_limit"],
        gpu(0).uuid: ["mem_clocks", "gpu_clocks", "power_limit"],
    }
    assert restored["restore_file_removed"] is True
    assert fake.fake_count("nvmlDeviceSetPowerManagementLimit", gpu(3).uuid) == 0
    assert not Path(record).exists()


def test_when_undoing_fails_the_file_stays_for_a_later_restore(record: str) -> None:
    fake = FakeNvml(
        [
            gpu(0, errors={"nvmlDeviceResetGpuLockedClocks": pynvml.NVML_ERROR_UNKNOWN}),
            gpu(1, errors={"nvmlDeviceSetGpuLockedClocks": pynvml.NVML_ERROR_UNKNOWN}),
        ]
    )
    with pytest.raises(ControlError) as caught:
        apply(fake, 500, (1200, 1500), None, record, node="n1")
    message = str(caught.value)
    assert message.startswith(f"locking the GPU clocks failed on GPU 1 ({gpu(1).uuid}) on n1")
    assert "could not put back" in message and "retry with `rtk profile --restore`" in message
    assert fake.fake_settings() == [(700_000, (1200, 1500), None), (700_000, None, None)]
    assert Path(record).exists()

    fake.fake_gpus[0].errors.clear()
    restore(fake, record)
    assert fake.fake_settings() == [(700_000, None, None)] * 2
    assert not Path(record).exists()


def test_restore_goes_on_past_a_failing_gpu_and_keeps_the_file(record: str) -> None:
    fake = FakeNvml(gpus(3))
    apply(fake, 500, (1200, 1500), None, record, node="n1")
    fake.fake_gpus[1].errors["nvmlDeviceSetPowerManagementLimit"] = pynvml.NVML_ERROR_UNKNOWN
    with pytest.raises(ControlError, match=r"could not put back every GPU setting on n1") as caught:
        restore(fake, record, node="n1")
    result = caught.value.result
    assert list(result["errors"]) == [f"{gpu(1).uuid} power_limit"]
    assert result["gpus"][gpu(1).uuid] == {"gpu_clocks": "restored"}
    assert fake.fake_settings() == [
        (700_000, None, None),
        (500_000, None, None),
        (700_000, None, None),
    ]
    assert Path(record).exists()
    fake.fake_gpus[1].errors.clear()
    restore(fake, record)
    assert fake.fake_settings() == [(700_000, None, None)] * 3
    assert not Path(record).exists()


def test_restore_is_idempotent_and_needs_no_nvml_without_a_file(record: str) -> None:
    fake = FakeNvml(gpus(2))
    apply(fake, 500, None, None, record)
    restore(fake, record)
    calls = sum(fake.fake_calls.values())
    again = restore(fake, record)
    assert again["nothing_to_do"] is True
    assert sum(fake.fake_calls.values()) == calls
    assert restore(None, record)["nothing_to_do"] is True  # pynvml is not even loaded


def test_restore_after_a_crash_in_a_new_process(record: str) -> None:
    first = FakeNvml(gpus(4, power_limit_mw=600_000))
    apply(first, 400, (1100, 1100), (1593, 1593), record)
    # The process dies here. The GPUs keep their settings; a new process starts afresh.
    later = FakeNvml(first.fake_gpus)
    restore(later, record)
    assert later.fake_settings() == [(600_000, None, None)] * 4


def test_a_second_apply_is_refused_while_a_restore_file_is_there(record: str) -> None:
    fake = FakeNvml(gpus(2))
    apply(fake, 500, None, None, record, node="n1")
    with pytest.raises(ControlError, match="still in place on n1 .*`rtk profile --restore`"):
        apply(fake, 400, None, None, record, node="n1")
    assert fake.fake_settings() == [(500_000, None, None)] * 2


def test_a_restore_file_others_may_write_is_not_trusted(record: str) -> None:
    fake = FakeNvml(gpus(1))
    apply(fake, 500, None, None, record)
    os.chmod(record, 0o666)
    with pytest.raises(ControlError, match="writable by others"):
        restore(fake, record)


def test_an_unwritable_restore_file_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    fake = FakeNvml(gpus(1))
    with pytest.raises(ControlError, match=r"cannot write .* on n1: .*; nothing changed"):
        apply(fake, 500, None, None, str(tmp_path / "file" / "gpu-restore.json"), node="n1")
    assert setter_calls(fake) == 0


def test_persistence_mode_off_is_warned_about(record: str) -> None:
    fake = FakeNvml([gpu(0, persistence_mode=False)])
    applied = apply(fake, 500, None, None, record, node="n1")
    assert applied["warnings"] == [
        f"persistence mode is off on GPU 0 ({gpu(0).uuid}) on n1: the driver may drop these"
        " settings when no process holds the GPU (nvidia-smi -pm 1)"
    ]
    restore(fake, record)


def test_the_fake_state_file_carries_changes_across_processes(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    FakeNvml(gpus(2, persistence_mode=False), root=False).fake_save(state)
    fake = from_state_file(state)
    assert fake.fake_root is False and fake.fake_gpus[0].persistence_mode is False
    fake.fake_root = True
    fake.nvmlInit()
    fake.nvmlDeviceSetGpuLockedClocks(fake.nvmlDeviceGetHandleByIndex(1), 900, 1000)
    assert from_state_file(state).fake_settings()[1] == (700_000, (900, 1000), None)


# -- the node script's JSON contract ------------------------------------------------------


def run_main(capsys: pytest.CaptureFixture[str], argv: list[str], fake: Any) -> tuple[int, Any]:
    code = control.main(argv, fake)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    return code, json.loads(lines[0])


def test_main_prints_one_json_line(capsys: pytest.CaptureFixture[str], record: str) -> None:
    fake = FakeNvml(gpus(2))
    argv = ["apply", "--node", "n1", "--restore-file", record, "--power-limit-w", "512.5"]
    code, answer = run_main(capsys, [*argv, "--gpu-clocks-mhz", "1200,1500"], fake)
    assert code == 0
    assert answer["ok"] is True and answer["command"] == "apply" and answer["node"] == "n1"
    assert answer["result"]["gpus"][gpu(0).uuid]["power_limit_w"] == 512.5
    assert fake.fake_settings() == [(512_500, (1200, 1500), None)] * 2

    code, answer = run_main(capsys, ["read", "--node", "n1", "--restore-file", record], fake)
    assert code == 0 and answer["result"]["gpus"][gpu(1).uuid]["power_limit_w"] == 512.5

    code, answer = run_main(capsys, ["restore", "--node", "n1", "--restore-file", record], fake)
    assert code == 0 and answer["result"]["errors"] == {}
    assert fake.fake_settings() == [(700_000, None, None)] * 2


def test_main_reports_a_refusal(capsys: pytest.CaptureFixture[str], record: str) -> None:
    fake = FakeNvml(gpus(1), root=False)
    argv = ["apply", "--node", "n1", "--restore-file", record, "--power-limit-w", "500"]
    code, answer = run_main(capsys, argv, fake)
    assert code == 3
    assert "ok" not in answer
    assert answer["error"].startswith("setting the power limit needs root on n1")
    assert answer["result"]["restored"]["restore_file_removed"] is True


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["apply", "--power-limit-w", "500"], "usage: apply needs --restore-file"),
        (["reboot"], "usage: argument command: invalid choice: 'reboot'"),
        (["apply", "--restore-file", "f", "--gpu-clocks-mhz", "fast"], "is not MIN,MAX in MHz"),
    ],
)
def test_main_bad_usage(capsys: pytest.CaptureFixture[str], argv: list[str], error: str) -> None:
    code, answer = run_main(capsys, argv, FakeNvml())
    assert code == 2 and "ok" not in answer and error in answer["error"]


def run_script(argv: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-", *argv],
        input=control_source(),
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def fake_env(state: Path) -> dict[str, str]:
    return {"RTK_FAKE_NVML": f"{FAKE_FILE}:from_state_file", "FAKE_NVML_STATE": str(state)}


def test_the_script_on_stdin_applies_and_a_new_process_restores(
    tmp_path: Path, record: str
) -> None:
    state = tmp_path / "state.json"
    FakeNvml(gpus(2, power_limit_mw=600_000)).fake_save(state)
    argv = ["--node", "n1", "--restore-file", record]
    code, answer = run_script(["apply", *argv, "--power-limit-w", "450"], fake_env(state))
    assert (code, answer["ok"]) == (0, True), answer
    assert from_state_file(state).fake_settings() == [(450_000, None, None)] * 2
    code, answer = run_script(["restore", *argv], fake_env(state))
    assert (code, answer["ok"]) == (0, True), answer
    assert from_state_file(state).fake_settings() == [(600_000, None, None)] * 2
    assert not Path(record).exists()


def test_the_fake_is_refused_outside_pytest(tmp_path: Path, record: str) -> None:
    state = tmp_path / "state.json"
    FakeNvml(gpus(1)).fake_save(state)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    done = subprocess.run(
        [sys.executable, "-", "read"],
        input=control_source(),
        capture_output=True,
        text=True,
        env={**env, **fake_env(state)},
        timeout=60,
        check=False,
    )
    answer = json.loads(done.stdout)
    assert done.returncode == 3
    assert answer["error"] == "RTK_FAKE_NVML is set but is only honoured under pytest"


def test_control_uses_only_real_pynvml_names() -> None:
    source = Path(control.__file__).read_text()
    names = set(re.findall(r"nvml\.((?:nvml|NVML)\w+)", source))
    assert {"nvmlDeviceSetPowerManagementLimit", "nvmlDeviceResetMemoryLockedClocks"} <= names
    assert sorted(n for n in names if not hasattr(pynvml, n)) == []
    assert re.findall(r"^(?:from|import) (\w+)", source, re.M) == [
        "__future__",
        *["argparse", "contextlib", "importlib", "importlib", "json", "os", "socket"],
        *["stat", "sys", "tempfile", "time", "collections", "typing", "toolkit"],
    ]  # the standard library, and toolkit.node.common, sent with it: no rtk on the nodes


# -- on a real GPU ------------------------------------------------------------------------


@pytest.mark.gpu
def test_power_limit_on_a_real_gpu(tmp_path: Path) -> None:
    """Read, lower the limit by 10% (needs root), put it back; the GPU ends as it began."""
    before = read_settings(pynvml)["gpus"]
    assert before
    if any(row["power_limit_min_w"] is None for row in before.values()):
        pytest.skip("a GPU here has no settable power limit")
    target_w = min(
        max(row["power_limit_w"] * 0.9, row["power_limit_min_w"]) for row in before.values()
    )
    record = str(tmp_path / "gpu-restore.json")
    try:
        apply(pynvml, target_w, None, None, record)
    except ControlError as e:
        if "needs root" in str(e):
            pytest.skip(str(e))
        raise
    try:
        during = read_settings(pynvml)["gpus"]
        for row in during.values():
            assert row["power_limit_w"] == pytest.approx(target_w, abs=1)
    finally:
        restore(pynvml, record)
    after = read_settings(pynvml)["gpus"]
    assert {u: r["power_limit_w"] for u, r in after.items()} == {
        u: r["power_limit_w"] for u, r in before.items()
    }
    assert not Path(record).exists()
