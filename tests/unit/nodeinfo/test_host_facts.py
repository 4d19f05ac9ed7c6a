"""``NodeFacts`` and ``GpuFacts``: the facts script's answer read once on the host.

The answers are the real script's: ``host_facts`` and ``reach`` run here, ``gpu_facts``
on the fake NVML (the GPU machine's test reads the real one, in
``tests/unit/preflight/test_gpu_facts.py``). Malformed ones break one field each.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from fake_nvml import FakeGpu, FakeNvml

from toolkit.errors import ClusterError
from toolkit.node.facts import gpu_facts, host_facts, reach
from toolkit.nodeinfo.gpu_facts import GpuFacts, RemappedRows
from toolkit.nodeinfo.host_facts import NodeFacts, PortReach

UUID = "GPU-00000000-5d1c-c2cb-6a5e-1a2b3c4d5e6f"


def as_sent(data: dict[str, Any]) -> dict[str, Any]:
    """What the host receives: the answer through JSON, as the script prints it."""
    parsed: dict[str, Any] = json.loads(json.dumps(data))
    return parsed


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def answer(tmp_path: Path, listening: int) -> dict[str, Any]:
    """This machine's facts, as ``facts.py`` prints them, with two GPUs (one ailing)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    gpus = [
        FakeGpu(uuid=UUID),
        FakeGpu(
            uuid=UUID.replace("00000000", "00000001"),
            remapped_rows=(0, 1, 1, 0),
            errors={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_GPU_IS_LOST},
        ),
    ]
    targets = {"n2:gcs": ("127.0.0.1", listening), "n2:dashboard": ("127.0.0.1", closed_port)}
    data = host_facts(str(tmp_path / "run"))
    data["reach"] = reach(targets)
    data["gpus"] = gpu_facts(FakeNvml(gpus))
    return as_sent(data)


def test_this_machines_facts_read_and_write_back_unchanged(answer: dict[str, Any]) -> None:
    facts = NodeFacts.from_json("n1", answer)
    assert facts.host.hostname == socket.gethostname()
    assert facts.host.disk_free_bytes == answer["disk_free_bytes"] > 0
    assert facts.software.version("python") == answer["versions"]["python"]
    assert facts.wall_s == answer["wall_s"]
    assert facts.reach["n2:gcs"].ok and facts.reach["n2:gcs"].ms is not None
    assert facts.reach["n2:dashboard"] == PortReach(
        False, None, answer["reach"]["n2:dashboard"]["error"]
    )
    assert facts.to_json() == answer
    assert NodeFacts.from_json("n1", facts.to_json()) == facts


def test_gpus_read_into_devices_with_their_fields(answer: dict[str, Any]) -> None:
    gpus = NodeFacts.from_json("n1", answer).gpus
    assert gpus.available and gpus.count == 2 and gpus.driver_version == "550.54.15"
    first, second = gpus.by_index()
    assert first.uuid == UUID and first.index == 0 and first.persistence_mode is True
    assert first.nvlink_active == (True,) * 18 and first.pcie_gen == first.pcie_gen_max == 5
    assert second.remapped_rows == RemappedRows(0, 1, True, False)
    assert second.ecc_volatile_uncorrected is None and "ecc_volatile_uncorrected" in second.errors
    assert second.label == f"GPU 1 ({second.uuid})"
    assert GpuFacts.from_json("n1", gpus.to_json()) == gpus


def test_a_node_without_gpus_reads_as_unavailable(answer: dict[str, Any]) -> None:
    answer["gpus"] = {"available": False, "reason": "pynvml (nvidia-ml-py) does not import"}
    facts = NodeFacts.from_json("n1", answer)
    assert facts.gpus == GpuFacts(available=False, reason=answer["gpus"]["reason"])
    assert facts.to_json() == answer
    del answer["gpus"], answer["reach"]
    bare = NodeFacts.from_json("n1", answer)
    assert bare.gpus == GpuFacts() and bare.reach == {}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"wall_s": "soon"}, "field 'wall_s' should be a number, got 'soon'"),
        ({"wall_s": None}, "field 'wall_s' should be a number, got None"),
        ({"hostname": None}, "field 'hostname' should be a string, got None"),
        ({"dev_shm_bytes": 1.5}, "field 'dev_shm_bytes' should be an integer or null, got 1.5"),
        ({"nofile": True}, "field 'nofile' should be an integer or null, got True"),
        (
            {"ephemeral_ports": [32768]},
            "field 'ephemeral_ports' should be [low, high], got [32768]",
        ),
        ({"hostname_addresses": "10.0.0.1"}, "field 'hostname_addresses' should be a list"),
        ({"versions": {"ray": 2}}, "field 'versions.ray' should be a string or null, got 2"),
        (
            {"reach": {"n2:gcs": {"ms": 1.0}}},
            "field 'reach.n2:gcs.ok' should be true or false, missing",
        ),
        ({"gpus": {"count": 1}}, "field 'gpus.available' should be true or false, missing"),
        (
            {"gpus": {"available": True, "devices": {UUID: {"index": "0"}}}},
            f"field 'gpus.devices.{UUID}.index' should be an integer or null, got '0'",
        ),
        (
            {"gpus": {"available": True, "devices": {UUID: {"nvlink_active": [1]}}}},
            f"field 'gpus.devices.{UUID}.nvlink_active[0]' should be true or false, got 1",
        ),
        (
            {"gpus": {"available": True, "devices": {UUID: {"remapped_rows": {"pending": 0}}}}},
            f"field 'gpus.devices.{UUID}.remapped_rows.corrected' should be an integer",
        ),
        (
            {
                "gpus": {
                    "available": True,
                    "devices": {UUID: {"remapped_rows": {"corrected": 0, "uncorrected": 0}}},
                }
            },
            f"field 'gpus.devices.{UUID}.remapped_rows.pending' should be true or false, missing",
        ),
        ({"wall_s": float("nan")}, "field 'wall_s' should be a number, got nan"),
    ],
)
def test_a_malformed_field_is_named_with_the_node(
    answer: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ClusterError) as caught:
        NodeFacts.from_json("n3", answer | change)
    text = str(caught.value)
    assert text.startswith(f"n3: malformed preflight facts from the node: {message}"), text


@pytest.mark.parametrize("field", ["hostname", "wall_s"])
def test_a_missing_required_field_is_named(answer: dict[str, Any], field: str) -> None:
    del answer[field]
    with pytest.raises(ClusterError, match=rf"^n3: .* field '{field}' should be .*, missing$"):
        NodeFacts.from_json("n3", answer)
