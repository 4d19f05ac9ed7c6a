"""The telemetry around a run: what starts before it and what ends after it, in order."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from toolkit.telemetry.around import RunTelemetry
from toolkit.telemetry.cluster_session import TelemetrySession
from toolkit.telemetry.settle import IdlePhases


class Session:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def start(self) -> None:
        self.events.append("samplers start")

    def helpers(self) -> dict[str, Any]:
        return {"node1": "sampler"}

    def stop(self) -> None:
        self.events.append("samplers stop")


class Idle:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def before(self) -> None:
        self.events.append("baseline")

    def after(self) -> None:
        self.events.append("cooldown")

    def save(self) -> None:
        self.events.append("idle.json")


def around(tmp_path: Path, events: list[str], **kwargs: Any) -> RunTelemetry:
    def gather(run_dir: str, helpers: Mapping[str, Any] | None) -> None:
        events.append(f"gather {sorted(helpers or {})}")

    return RunTelemetry(
        tmp_path,
        cast(TelemetrySession, Session(events)),
        cast(IdlePhases, Idle(events)),
        gather=gather,
        **kwargs,
    )


def test_a_run_that_succeeded_cools_down_then_everything_ends(tmp_path: Path) -> None:
    events: list[str] = []
    telemetry = around(tmp_path, events)
    telemetry.begin()
    telemetry.end(0)
    assert events == [
        "samplers start",
        "baseline",
        "cooldown",
        "idle.json",
        "gather ['node1']",  # through the running samplers
        "samplers stop",
    ]


@pytest.mark.parametrize(("code", "cooldown_after_failure"), [(1, False), (None, True)])
def test_no_cooldown_after_a_failure_or_a_signal(
    tmp_path: Path, code: int | None, cooldown_after_failure: bool
) -> None:
    events: list[str] = []
    around(tmp_path, events, cooldown_after_failure=cooldown_after_failure).end(code)
    assert events == ["idle.json", "gather ['node1']", "samplers stop"]


def test_a_recorded_command_that_failed_still_cools_down(tmp_path: Path) -> None:
    events: list[str] = []
    around(tmp_path, events, cooldown_after_failure=True).end(3)
    assert events[0] == "cooldown"


def test_without_telemetry_the_ranks_files_are_still_gathered(tmp_path: Path) -> None:
    gathered: list[tuple[str, object]] = []
    telemetry = RunTelemetry(
        tmp_path, None, gather=lambda run_dir, helpers: gathered.append((run_dir, helpers))
    )
    telemetry.begin()
    telemetry.end(0)
    assert gathered == [(str(tmp_path), None)]  # by a task on each node


def test_a_failed_cooldown_still_saves_gathers_and_stops(tmp_path: Path) -> None:
    events: list[str] = []

    class Failing(Idle):
        def after(self) -> None:
            raise RuntimeError("a node went away")

    def gather(run_dir: str, helpers: Mapping[str, Any] | None) -> None:
        events.append("gather")

    telemetry = RunTelemetry(
        tmp_path,
        cast(TelemetrySession, Session(events)),
        cast(IdlePhases, Failing(events)),
        gather=gather,
    )
    with pytest.raises(RuntimeError):
        telemetry.end(0)
    assert events == ["idle.json", "gather", "samplers stop"]
