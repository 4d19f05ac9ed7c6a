"""The sampler's answers to the driver: typed records that cross the Ray actor boundary."""

from __future__ import annotations

import pickle

from toolkit.rundir.devices import HostInfo
from toolkit.telemetry.cluster_session import _Node, _node_manifest
from toolkit.telemetry.node_sampler import CompactedTrace, SamplerInfo
from toolkit.telemetry.sampler import PowerWindow, SamplerStats

HOST = HostInfo(power_source="model", energy_source="model", power_source_reason="no RAPL", cpus=2)


def test_answers_survive_pickling_as_ray_sends_them() -> None:
    answers = [
        SamplerInfo("h1", "n1", 42, ("host", "nvml"), {"host": HOST}, "tmp/n1.arrows"),
        PowerWindow(5.0, 812.5, 61.0),
        SamplerStats(samples=3, ticks=3, first_wall_s=1.0, last_wall_s=2.0),
        CompactedTrace("tmp/n1.compact.arrows", 1024, 3, 1.0, 2.0, ("cut",)),
    ]
    assert [pickle.loads(pickle.dumps(a)) for a in answers] == answers


def test_the_manifest_entry_takes_the_copied_trace_over_the_stop_statistics() -> None:
    node = _Node("n1", "id1")
    node.info = SamplerInfo("h1", "n1", 42, ("host",), {"host": HOST}, "tmp/a")
    node.stats = SamplerStats(samples=10, ticks=12, errors=1, first_wall_s=1.0, last_wall_s=9.0)
    node.collected = CompactedTrace("tmp/b", 100, 8, 1.5, 8.5, ("a.arrows: cut",))
    manifest = _node_manifest(node)
    assert manifest.samples_expected == 8
    entry = manifest.to_json()
    assert entry["hostname"] == "h1" and entry["pid"] == 42 and entry["sensors"] == ["host"]
    assert entry["devices"] == {
        "host": {
            "kind": "host",
            "cpus": 2,
            "power_source": "model",
            "power_source_reason": "no RAPL",
            "energy_source": "model",
            "rapl_domains": [],
        }
    }
    assert entry["sampler"] == {
        **SamplerStats(samples=10, ticks=12, errors=1).to_json(),
        "samples": 8,
        "first_wall_s": 1.5,
        "last_wall_s": 8.5,
        "truncated": ["a.arrows: cut"],
    }
    assert list(entry["sampler"]) == [*SamplerStats().to_json(), "truncated"]  # as written before


def test_a_lost_sampler_whose_trace_was_copied_still_has_its_counts() -> None:
    node = _Node("n2", "id2", status="lost")
    node.collected = CompactedTrace("tmp/b", 100, 4, 1.0, 2.0, ())
    entry = _node_manifest(node).to_json()
    assert entry["hostname"] == "n2" and entry["sampler"] == {
        "samples": 4,
        "first_wall_s": 1.0,
        "last_wall_s": 2.0,
    }
    assert _node_manifest(_Node("n3", "id3")).to_json()["sampler"] is None
