"""One node's steps of ``rtk up``: putting back the GPU settings a crashed run left.

The nodes are scripted (``ScriptedTransport``); the GPU control script's ``restore`` is
answered by the real ``gpu_control.main`` on the NVML fake, over the real restore
file a run's ``node_power`` left. The node agent's probe is the real one.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml
from scripted_transport import Call, Reply, ScriptedTransport, answer

from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.gpu.limits_over_ssh import control_source, restore_file
from toolkit.inventory import load_inventory
from toolkit.lifecycle.start import RAY_READY_TEXT, UpResult, up
from toolkit.node import agent
from toolkit.node import gpu_control as control
from toolkit.nodeinfo.probe import ProbeFacts
from toolkit.power.node_power import node_power
from toolkit.ray_resources import host_resource
from toolkit.state.store import StateStore

ETHERNET = str(REPO / "tests" / "data" / "sysfs" / "ethernet")
ADDRESSES = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
START = r"&& exec .* start "
RESTORE = r" - restore --node "
LINE = "n2: put back GPU power limits an earlier run left (rtk/gpu-restore.json)"


class Lines(QuietReporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


@pytest.fixture
def temp_dir() -> Iterator[Path]:
    """Ray's temp dir: short, as Ray's socket paths below it must be."""
    path = Path(tempfile.mkdtemp(prefix="rtk-ns-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def a_plan(tmp_path: Path, temp_dir: Path) -> ClusterPlan:
    data: dict[str, Any] = {
        "cluster": "scripted",
        "nodes": [{"host": name, "address": address} for name, address in ADDRESSES.items()],
        "ray": {"auth": "none", "wait_timeout_s": 5, "temp_dir": str(temp_dir / "ray")},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plan(load_inventory(path))


def nodes(fakes: dict[str, FakeNvml], left: dict[str, str]) -> ScriptedTransport:
    """Nodes that start Ray; ``left``: node -> what a crashed run left there besides its
    GPU restore file: ``nothing`` else, ``leftovers`` (processes), or a ``raylet``.
    """
    transport = ScriptedTransport()
    alive = {name for name, what in left.items() if what == "raylet"}

    def probe(call: Call) -> Reply:
        args = shlex.split(call.command)
        marker_dir = args[args.index("probe") + 2]
        route = {"head_ip": ADDRESSES["n1"], "source_ip": ADDRESSES[call.node], "interface": "eth0"}
        what = left.get(call.node)
        facts: dict[str, Any] = {
            "route": route,
            "network": {**agent.network_facts("eth0", ETHERNET), "interface_source": "route"},
            "rtk_pids": [4242] if what in ("leftovers", "raylet") else [],
            "raylet_running": what == "raylet",
            "busy_ports": [],
        }
        if what:
            facts["gpu_restore_file"] = f"{marker_dir}/rtk/gpu-restore.json"
        return answer(facts)

    def start(call: Call) -> Reply:
        alive.add(call.node)
        return Reply(stdout=f"{RAY_READY_TEXT}\n")

    def status(call: Call) -> Reply:
        listed = [
            {
                "node_id": f"id-{name}",
                "state": "ALIVE",
                "node_ip": ADDRESSES[name],
                "resources": {host_resource(name): 1.0, "CPU": 4.0},
            }
            for name in sorted(alive)
        ]
        return answer({"ray_version": "2.60.0", "nodes": listed})

    def gpu_control(call: Call) -> Reply:
        assert call.stdin == control_source()
        argv = shlex.split(call.command)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = control.main(argv[argv.index("-") + 1 :], fakes[call.node])
        return Reply(exit_code=code, stdout=out.getvalue())

    transport.on("*", r" - probe ", probe)
    transport.on("*", START, start)
    transport.on("n1", r" - status ", status)
    transport.on("*", r" - stop ", answer({"stopped": 1, "killed": 0, "left": []}))
    transport.on("*", RESTORE, gpu_control)
    return transport


def bring_up(
    plan: ClusterPlan, transport: ScriptedTransport, tmp_path: Path
) -> tuple[UpResult, list[str]]:
    lines = Lines()
    result = up(plan, transport, StateStore(plan.inventory.name, root=tmp_path / "state"), lines)
    return result, lines.lines


def crashed_run(plan: ClusterPlan) -> FakeNvml:
    """A node's GPUs where a run set limits and died: their restore file is left."""
    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}", power_limit_mw=650_000) for i in range(2)])
    left = node_power("n2", "raysubmit_crashed", {0: 300, 1: 400}, restore_file(plan), fake)
    assert left.errors == ()
    return fake


@pytest.mark.parametrize("what", ["nothing", "leftovers"])
def test_rtk_up_puts_back_what_a_crashed_run_left_before_ray_starts(
    tmp_path: Path, temp_dir: Path, what: str
) -> None:
    plan = a_plan(tmp_path, temp_dir)
    fake = crashed_run(plan)
    transport = nodes({"n2": fake}, {"n2": what})
    result, lines = bring_up(plan, transport, tmp_path)
    assert result.started == ["n1", "n2", "n3"]
    assert [g.power_limit_mw for g in fake.fake_gpus] == [650_000, 650_000]
    assert not Path(restore_file(plan)).exists()
    assert LINE in lines
    restores = transport.commands(pattern=RESTORE)
    assert len(restores) == 1 and restores == transport.commands("n2", RESTORE)
    order = [c for c in transport.commands("n2") if " - restore " in c or " - stop " in c]
    assert " - restore " in order[0]  # before the stop, which removes Ray's temp dir
    assert len(order) == (1 if what == "nothing" else 2)


def test_where_ray_still_runs_the_settings_are_left_and_said_so(
    tmp_path: Path, temp_dir: Path
) -> None:
    plan = a_plan(tmp_path, temp_dir)
    fake = crashed_run(plan)
    transport = nodes({"n2": fake}, {"n2": "raylet"})
    result, lines = bring_up(plan, transport, tmp_path)
    assert [n.action for n in result.nodes if n.name == "n2"] == ["already running"]
    assert transport.commands(pattern=RESTORE) == []
    assert [g.power_limit_mw for g in fake.fake_gpus] == [300_000, 400_000]
    assert (
        "n2: GPU settings a run set are in place (rtk/gpu-restore.json); left while Ray runs"
        " here (`rtk profile --restore` puts them back)"
    ) in lines


def test_a_restore_that_fails_is_said_and_the_node_comes_up(tmp_path: Path, temp_dir: Path) -> None:
    plan = a_plan(tmp_path, temp_dir)
    fake = crashed_run(plan)
    fake.fake_root = False
    transport = nodes({"n2": fake}, {"n2": "leftovers"})
    result, lines = bring_up(plan, transport, tmp_path)
    assert result.started == ["n1", "n2", "n3"]
    failed = [line for line in lines if line.startswith("n2: could not put back")]
    assert len(failed) == 1
    assert failed[0].startswith(
        "n2: could not put back the GPU power limits an earlier run left"
        " (rtk/gpu-restore.json): could not put back every GPU setting on n2 (GPU-0"
    )


def test_the_probe_reports_the_restore_file_only_when_it_is_there(tmp_path: Path) -> None:
    marker = tmp_path / "ray"
    without = ProbeFacts.from_json("n1", agent.probe("127.0.0.1", str(marker), ""))
    assert without.gpu_restore_file is None
    assert "gpu_restore_file" not in without.to_json()
    (marker / "rtk").mkdir(parents=True, exist_ok=True)
    (marker / "rtk" / "gpu-restore.json").write_text("{}")
    sent = json.loads(json.dumps(agent.probe("127.0.0.1", str(marker), "")))
    facts = ProbeFacts.from_json("n1", sent)
    assert facts.gpu_restore_file == str(marker / "rtk" / "gpu-restore.json")
    assert ProbeFacts.from_json("n1", facts.to_json()) == facts


def test_rtk_down_keeps_only_the_restore_file_for_rtk_up(tmp_path: Path) -> None:
    marker = tmp_path / "ray"
    for path in ("rtk/auth_token", "rtk/hosts/n1", "session_1/logs/raylet.out"):
        (marker / path).parent.mkdir(parents=True, exist_ok=True)
        (marker / path).write_text("x")
    (marker / "session_latest").symlink_to(marker / "session_1")
    (marker / "rtk" / "gpu-restore.json").write_text("{}")
    answer = agent.stop(str(marker), "1")
    assert answer == {"stopped": 0, "killed": 0, "left": [], "removed": False}
    kept = sorted(str(p.relative_to(marker)) for p in marker.rglob("*"))
    assert kept == ["rtk", "rtk/gpu-restore.json"]
    (marker / "rtk" / "gpu-restore.json").unlink()  # put back: rtk down removes it all
    assert agent.stop(str(marker), "1")["removed"] is True and not marker.exists()
