"""``state.json`` as a typed record: round trips, keys of other rtk versions, bad fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.errors import StateError
from toolkit.rundir.preflight import Exclusion
from toolkit.state.cluster_state import ClusterState, RecordedRun
from toolkit.state.store import StateStore
from toolkit.train.job_spec import remember_run

# What rtk up wrote before state.json had a type (plus a run, and a key of its own).
WRITTEN_BY_AN_OLDER_RTK = {
    "cluster": "c1",
    "source": "/home/u/inv.yaml",
    "head": "n1",
    "dashboard_url": "http://10.0.0.1:8265",
    "temp_dir": "/tmp/ray-c1",
    "nodes": ["n1", "n2", "n3"],
    "excluded": [{"node": "n3", "reasons": ["--exclude"], "head": False}],
    "up_at": 1700000000.5,
    "nodes_rtk_digest": "ab" * 32,
    "runs": [{"run_id": "r1", "run_dir": "/runs/r1", "at": 1700000100}],
    "gpu_clocks_locked": {"n1": True},
}


def test_a_full_state_round_trips_through_json_and_the_store(tmp_path: Path) -> None:
    state = ClusterState(
        cluster="c1",
        source="inv.yaml",
        head="n1",
        dashboard_url="http://10.0.0.1:8265",
        temp_dir="/tmp/ray-c1",
        nodes=("n1", "n2"),
        excluded=(Exclusion("n3", ("net.bandwidth: 0.8 Gbit/s",)),),
        up_at_wall_s=1700000000.5,
        nodes_rtk_digest="ab" * 32,
        runs=(RecordedRun("r1", "/runs/r1", 1700000100.0),),
        other={"kept": [1, 2]},
    )
    assert ClusterState.from_json(json.loads(json.dumps(state.to_json()))) == state
    store = StateStore("c1", tmp_path)
    store.save(state)
    assert store.load() == state
    assert json.loads(store.state_file.read_text())["up_at"] == 1700000000.5


def test_a_state_an_older_rtk_wrote_loads_and_its_unknown_keys_survive_a_save(
    tmp_path: Path,
) -> None:
    store = StateStore("c1", tmp_path)
    store.dir.mkdir(parents=True)
    store.state_file.write_text(json.dumps(WRITTEN_BY_AN_OLDER_RTK))
    state = store.load()
    assert state is not None
    assert (state.head, state.nodes, state.up_at_wall_s) == ("n1", ("n1", "n2", "n3"), 1700000000.5)
    assert state.excluded == (Exclusion("n3", ("--exclude",)),)
    assert state.last_run == RecordedRun("r1", "/runs/r1", 1700000100.0)
    assert state.other == {"gpu_clocks_locked": {"n1": True}}
    # A command of this rtk that records a run rewrites the file: nothing of it is lost.
    remember_run(store, "r2", "/runs/r2")
    written = json.loads(store.state_file.read_text())
    assert written["gpu_clocks_locked"] == {"n1": True}
    assert {k: v for k, v in written.items() if k != "runs"} == {
        k: v for k, v in WRITTEN_BY_AN_OLDER_RTK.items() if k != "runs"
    }
    assert [r["run_id"] for r in written["runs"]] == ["r1", "r2"]


def test_a_run_recorded_again_moves_to_the_end_and_needs_no_bring_up(tmp_path: Path) -> None:
    store = StateStore("c1", tmp_path)
    remember_run(store, "r1", "/runs/r1")
    remember_run(store, "r2", "/runs/r2")
    remember_run(store, "r1", "/runs/r1b")
    state = store.load()
    assert state is not None and state.cluster is None and state.head is None
    assert [(r.run_id, r.run_dir) for r in state.runs] == [("r2", "/runs/r2"), ("r1", "/runs/r1b")]
    assert set(json.loads(store.state_file.read_text())) == {"nodes", "excluded", "runs"}


def test_an_excluded_entry_this_rtk_cannot_read_is_skipped() -> None:
    state = ClusterState.from_json({"excluded": [{"node": 7}, {"node": "n2", "reasons": []}]})
    assert state.excluded == (Exclusion("n2", ()),)
    assert ClusterState.from_json({"excluded": "n2"}).excluded == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"head": 3}, "state.json: head: expected text or null, got 3"),
        ({"nodes": "n1"}, "state.json: nodes: expected a list of text, got 'n1'"),
        ({"up_at": "noon"}, "state.json: up_at: expected a number or null, got 'noon'"),
        ({"runs": {}}, "state.json: runs: expected a list of runs, got {}"),
        ({"runs": [{"run_id": "r1"}]}, "state.json: runs: 0: run_dir: expected text, got None"),
        ([], "state.json: expected a JSON object, got []"),
    ],
)
def test_a_known_field_of_the_wrong_type_is_a_state_error_naming_it(
    data: object, message: str
) -> None:
    with pytest.raises(StateError) as caught:
        ClusterState.from_json(data)
    assert str(caught.value) == message


def test_the_store_names_its_file_and_treats_a_non_object_as_no_state(tmp_path: Path) -> None:
    store = StateStore("c1", tmp_path)
    store.dir.mkdir(parents=True)
    store.state_file.write_text('{"temp_dir": false}')
    with pytest.raises(StateError, match=f"{store.state_file}: temp_dir: expected text or null"):
        store.load()
    store.state_file.write_text("[1, 2]")
    assert store.load() is None
