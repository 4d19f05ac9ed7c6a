"""The torchrun request as data: its JSON, each node's command, the ranks per node."""

from __future__ import annotations

import pytest

from toolkit.errors import RunDirError
from toolkit.torchrun.spec import TorchrunSpec, node_argv, nproc_for, nproc_problem


def test_the_spec_survives_its_json() -> None:
    spec = TorchrunSpec("train.py", ("--lr", "1e-4"), 2, True, {"A": "1"}, 29500, "run-7", 3, False)
    assert TorchrunSpec.from_json(spec.to_json()) == spec


def test_a_bad_spec_names_the_field() -> None:
    data = TorchrunSpec("train.py").to_json() | {"rdzv_port": "x"}
    with pytest.raises(RunDirError, match="rdzv_port"):
        TorchrunSpec.from_json(data)


def test_every_node_meets_at_the_heads_rendezvous_with_the_same_id() -> None:
    spec = TorchrunSpec("train.py", ("--epochs", "1"), rdzv_port=29401, run_id="r1")
    argv = node_argv(spec, 3, "10.0.0.1", 8, is_host=True)
    assert argv[:2] == ["-m", "torch.distributed.run"]
    assert "--nnodes=3" in argv and "--nproc-per-node=8" in argv
    assert "--rdzv-backend=c10d" in argv and "--rdzv-endpoint=10.0.0.1:29401" in argv
    assert "--rdzv-id=r1" in argv
    # The head serves the rendezvous whatever its hostname resolves to (127.0.1.1 on
    # Debian); the others only ever connect to it.
    assert "--rdzv-conf=is_host=1" in argv
    assert "--rdzv-conf=is_host=0" in node_argv(spec, 3, "10.0.0.1", 8, is_host=False)
    # Through rtk's runner: as python SCRIPT, without the interpreter's finalization.
    assert argv[-5:] == ["-m", "toolkit.markers.script_runner", "train.py", "--epochs", "1"]


def test_auto_steps_runs_the_script_through_the_hooks_module() -> None:
    argv = node_argv(TorchrunSpec("train.py", ("-x",), auto_steps=True), 1, "h", 1, is_host=True)
    assert argv[-4:] == ["-m", "toolkit.markers.auto_steps", "train.py", "-x"]
    module = node_argv(
        TorchrunSpec("pkg.train", module=True, auto_steps=True), 1, "h", 1, is_host=True
    )
    assert module[-4:] == ["-m", "toolkit.markers.auto_steps", "-m", "pkg.train"]


def test_an_ipv6_head_is_bracketed() -> None:
    assert "--rdzv-endpoint=[fd00::1]:29400" in node_argv(
        TorchrunSpec("t.py"), 2, "fd00::1", 1, is_host=False
    )


def test_ranks_per_node_default_to_its_gpus_or_one() -> None:
    assert nproc_for(TorchrunSpec("t.py"), 8) == 8
    assert nproc_for(TorchrunSpec("t.py"), 0) == 1
    assert nproc_for(TorchrunSpec("t.py", nproc_per_node=3), 8) == 3


def test_more_ranks_than_gpus_is_refused_and_cpu_nodes_take_any() -> None:
    why = nproc_problem(TorchrunSpec("t.py", nproc_per_node=9), "gpu07", 8)
    assert why is not None and "gpu07 has 8 GPU(s)" in why and "at most 8" in why
    assert nproc_problem(TorchrunSpec("t.py", nproc_per_node=8), "gpu07", 8) is None
    assert nproc_problem(TorchrunSpec("t.py", nproc_per_node=4), "cpu1", 0) is None
    assert nproc_problem(TorchrunSpec("t.py", nproc_per_node=0), "cpu1", 0) is not None
