"""A Ray job as it would be submitted: its text for ``--dry-run`` and its JSON."""

from __future__ import annotations

import json

from toolkit.jobs.request import Driver, JobRequest


def _request(driver: Driver) -> JobRequest:
    env = {"working_dir": ".", "env_vars": {"A": "1", "B": "2"}}
    return JobRequest("train", "python -m x", env, "rtk-train-1", "http://h:8265", "/r", driver)


def test_the_text_says_where_the_driver_runs_and_every_env_entry() -> None:
    text = _request(Driver.JOB).render()
    assert text.splitlines() == [
        "train job rtk-train-1 via http://h:8265",
        "  entrypoint: python -m x",
        "  working_dir: .",
        "  env_vars:",
        "    A=1",
        "    B=2",
        "  run directory: /r",
    ]
    local = _request(Driver.LOCAL).render()
    assert local.startswith("train job rtk-train-1 as a process here, on the head")


def test_notes_follow_the_request_and_the_json_round_trips_through_text() -> None:
    request = JobRequest("t", "e", {}, "s", "u", notes=("one", "two"))
    assert request.render().endswith("  one\n  two\n")
    data = json.loads(json.dumps(_request(Driver.LOCAL).to_json()))
    assert data["driver"] == "local" and data["runtime_env"]["env_vars"] == {"A": "1", "B": "2"}
