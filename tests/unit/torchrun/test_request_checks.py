"""What rtk torchrun refuses before anything starts (real files, a real port here)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conftest import REPO

from toolkit.cluster.connect import make_transport
from toolkit.cluster.plan import build_plan
from toolkit.errors import TorchrunError
from toolkit.inventory import load_inventory
from toolkit.inventory.loader import default_inventory
from toolkit.stall.settings import WatchSettings
from toolkit.torchrun.request_checks import check_port, check_request, script_problem
from toolkit.torchrun.spec import TorchrunSpec


def test_a_script_is_looked_for_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    assert script_problem(TorchrunSpec("train.py"), str(tmp_path)) is None
    why = script_problem(TorchrunSpec("trian.py"), str(tmp_path))
    assert why is not None and why.startswith("trian.py: no such file in the working directory")
    # A module, or an absolute path, is for the nodes to find.
    assert script_problem(TorchrunSpec("pkg.train", module=True), str(tmp_path)) is None
    assert script_problem(TorchrunSpec("/opt/train.py"), str(tmp_path)) is None


def test_more_ranks_than_a_node_declares_gpus_is_refused(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    plan = build_plan(load_inventory(REPO / "inventory.example.yaml"))
    check_request(TorchrunSpec("train.py", nproc_per_node=4), plan, str(tmp_path))
    with pytest.raises(TorchrunError, match=r"gpu01 has 4 GPU\(s\): --nproc-per-node 5"):
        check_request(TorchrunSpec("train.py", nproc_per_node=5), plan, str(tmp_path))


def test_restart_excluding_is_for_rtk_train(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    plan = build_plan(load_inventory(REPO / "inventory.example.yaml"))
    spec = TorchrunSpec("train.py", stall=WatchSettings(policy="restart-excluding"))
    with pytest.raises(TorchrunError, match=r"restart-excluding resumes .*--on-stall abort"):
        check_request(spec, plan, str(tmp_path))
    check_request(
        TorchrunSpec("train.py", stall=WatchSettings(policy="abort")), plan, str(tmp_path)
    )


def test_a_port_another_process_listens_on_is_refused_on_the_head() -> None:
    inventory = default_inventory()
    plan = build_plan(inventory)
    with socket.socket() as server, make_transport(inventory) as transport:
        server.bind(("", 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(TorchrunError, match=f"rendezvous port {port} on the head .* in use"):
            check_port(TorchrunSpec("t.py", rdzv_port=port), plan, transport)
        server.close()
        check_port(TorchrunSpec("t.py", rdzv_port=port), plan, transport)
