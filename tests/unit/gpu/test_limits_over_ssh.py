"""GPU settings on every node for a block (``gpu_settings``), and after a crash (``restore_all``).

The node script (``toolkit/node/gpu_control.py``) runs for real over ``LocalTransport``
on the NVML fake, which comes in through ``RTK_FAKE_NVML`` (honoured only under pytest)
and keeps its GPUs in the JSON file named by ``FAKE_NVML_STATE``, so each call of the
script sees what the ones before it set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml, from_state_file

from toolkit.cluster.plan import ClusterPaths, ClusterPlan, build_plan
from toolkit.errors import GpuControlError
from toolkit.gpu.limits_over_ssh import (
    call_control,
    control_command,
    gpu_settings,
    restore_all,
    restore_file,
)
from toolkit.inventory import default_inventory
from toolkit.rundir.gpu_settings import GpuApplied, NodeGpuSettings
from toolkit.transport import LocalTransport
from toolkit.transport.base import CommandResult

FAKE_FILE = REPO / "tests" / "fake_nvml.py"


def gpu(index: int, **kwargs: Any) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{index:08x}-5d1c-c2cb-6a5e-1a2b3c4d5e6f", **kwargs)


def gpus(count: int = 4, **kwargs: Any) -> list[FakeGpu]:
    return [gpu(i, **kwargs) for i in range(count)]


def fake_env(state: Path) -> dict[str, str]:
    return {"RTK_FAKE_NVML": f"{FAKE_FILE}:from_state_file", "FAKE_NVML_STATE": str(state)}


def test_the_command_line_quotes_every_value(tmp_path: Path) -> None:
    plan = one_node_plan(tmp_path)
    node = dataclasses.replace(plan.head.node, name="n1'; touch pwned")
    head = dataclasses.replace(plan.head, node=node)
    command = control_command(head, "apply", "/t/rtk/gpu-restore.json", 512.5, (1200, 1500))
    assert command == (
        f"{node.python} - apply --node 'n1'\"'\"'; touch pwned' --restore-file"
        " /t/rtk/gpu-restore.json --power-limit-w 512.5 --gpu-clocks-mhz 1200,1500"
    )
    assert restore_file(plan) == f"{tmp_path}/rtk-temp/rtk/gpu-restore.json"


# -- gpu_settings on the local transport --------------------------------------------------


def one_node_plan(tmp_path: Path, gpu_count: int = 4) -> ClusterPlan:
    inventory = default_inventory()
    node = dataclasses.replace(inventory.nodes[0], gpus=gpu_count)
    plan = build_plan(dataclasses.replace(inventory, nodes=(node,)))
    return dataclasses.replace(plan, paths=ClusterPaths(str(tmp_path / "rtk-temp")))


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state.json"
    FakeNvml(gpus(4, power_limit_mw=650_000)).fake_save(path)
    for key, value in fake_env(path).items():
        monkeypatch.setenv(key, value)
    return path


def settings_of(state: Path) -> list[Any]:
    return from_state_file(state).fake_settings()


@pytest.mark.parametrize("raised", [RuntimeError("the run broke"), KeyboardInterrupt()])
def test_gpu_settings_restore_when_the_block_raises(
    tmp_path: Path, state: Path, raised: BaseException
) -> None:
    plan = one_node_plan(tmp_path)
    before = settings_of(state)
    with (
        pytest.raises(type(raised)),
        gpu_settings(plan, LocalTransport(), 500, (1200, 1500)) as applied,
    ):
        assert settings_of(state) == [(500_000, (1200, 1500), None)] * 4
        settings = applied["localhost"]
        assert settings.gpus[gpu(0).uuid] == GpuApplied(0, 500.0, 650.0, (1200, 1500))
        assert len(settings.gpus) == 4 and settings.restore_file == restore_file(plan)
        assert Path(restore_file(plan)).exists()
        raise raised
    assert settings_of(state) == before
    assert not Path(restore_file(plan)).exists()


def test_gpu_settings_restore_after_a_normal_block(tmp_path: Path, state: Path) -> None:
    plan = one_node_plan(tmp_path)
    with gpu_settings(plan, LocalTransport(), mem_clocks_mhz=(1593, 1593)):
        assert settings_of(state) == [(650_000, None, (1593, 1593))] * 4
    assert settings_of(state) == [(650_000, None, None)] * 4


def test_gpu_settings_refused_names_the_node_and_changes_nothing(
    tmp_path: Path, state: Path
) -> None:
    fake = from_state_file(state)
    fake.fake_root = False
    fake.fake_save()
    plan = one_node_plan(tmp_path)
    entered = False
    with pytest.raises(GpuControlError) as caught, gpu_settings(plan, LocalTransport(), 500):
        entered = True
    assert not entered
    assert str(caught.value) == (
        "GPU settings failed on 1 of 1 node(s):\n"
        "  localhost: setting the power limit needs root on localhost (nvidia-smi -pl needs it"
        " too); run rtk as root or drop power_limit_w from the sweep\n"
        "every node's GPU settings are as they were before"
    )
    assert settings_of(state) == [(650_000, None, None)] * 4
    assert not Path(restore_file(plan)).exists()


class CtrlCWhileRestoring(LocalTransport):
    def run(self, node: Any, command: str, **kwargs: Any) -> Any:
        if " restore " in command:
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C during the restore
        return super().run(node, command, **kwargs)


def test_ctrl_c_during_the_restore_waits_for_it(tmp_path: Path, state: Path) -> None:
    plan = one_node_plan(tmp_path)
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), gpu_settings(plan, CtrlCWhileRestoring(), 500):
        pass
    assert settings_of(state) == [(650_000, None, None)] * 4  # restored all the same
    assert signal.getsignal(signal.SIGINT) is handler


class NoNodes(LocalTransport):
    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no node should be touched")


def test_gpu_settings_with_nothing_asked_touches_no_node(tmp_path: Path) -> None:
    with gpu_settings(one_node_plan(tmp_path, gpu_count=0), NoNodes()) as applied:
        assert applied == {}


def test_a_power_limit_on_a_cluster_without_gpus_is_an_error(tmp_path: Path) -> None:
    plan = one_node_plan(tmp_path, gpu_count=0)
    with (
        pytest.raises(GpuControlError, match=r"power_limit_w=500 was asked, but no node"),
        gpu_settings(plan, NoNodes(), 500),
    ):
        pass


def test_restore_all_after_a_crash(tmp_path: Path, state: Path) -> None:
    plan = one_node_plan(tmp_path)
    # What gpu_settings does on entry; then the rtk process dies: nothing is put back.
    command = control_command(plan.head, "apply", restore_file(plan), 400, (1000, 1000))
    answer = call_control(LocalTransport(), plan.head, command)
    assert settings_of(state) == [(400_000, (1000, 1000), None)] * 4
    # The record writes what the script answered, as profile_run.json always held it.
    assert NodeGpuSettings.from_fields(answer).to_json() == answer.data
    answers = restore_all(plan, LocalTransport())
    done = answers["localhost"]
    assert not done.nothing_to_do and done.failed is None
    assert done.done == tuple(
        f"localhost: put back the power limit, gpu clocks of GPU {g.uuid}" for g in gpus(4)
    )
    assert settings_of(state) == [(650_000, None, None)] * 4
    assert restore_all(plan, LocalTransport())["localhost"].nothing_to_do is True


class MalformedAnswer(LocalTransport):
    def run(self, node: Any, command: str, **kwargs: Any) -> Any:
        answer = {"ok": True, "result": {"node": node.name, "restore_file": "f", "gpus": {}}}
        answer["result"]["gpus"] = {"GPU-1": {"index": "0"}}
        return CommandResult(node.name, command, 0, json.dumps(answer) + "\n", "", 0.1)


def test_a_malformed_answer_is_an_error_naming_the_node_and_the_field(
    tmp_path: Path,
) -> None:
    plan = one_node_plan(tmp_path)
    with pytest.raises(GpuControlError) as caught, gpu_settings(plan, MalformedAnswer(), 500):
        pass
    assert (
        "localhost: malformed GPU control answer from the node: field"
        " 'result.gpus.GPU-1.index' should be an integer, got '0'"
    ) in str(caught.value)
