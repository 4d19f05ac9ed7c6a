"""The records at the top of a run directory: command.json, idle.json, profile_run.json.

Each is a frozen dataclass with ``to_json``/``from_json`` (and ``read``/``write``), used
by the code that writes the file and by the code that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from toolkit.fields import Fields, is_number
from toolkit.json_types import JsonObject
from toolkit.rundir.gpu_settings import NodeGpuSettings
from toolkit.rundir.record_base import Record, check_version, record_fields

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CommandRecord(Record):
    """What ``rtk telemetry record`` ran (``command.json``).

    Attributes:
        command: The command line.
        exit_code: Its exit status (126/127 when it could not be run).
        duration_s: How long it ran.
    """

    command: tuple[str, ...]
    exit_code: int
    duration_s: float

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "command": list(self.command),
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "command.json") -> CommandRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(
            f.texts("command", required=True), f.integer("exit_code"), f.number("duration_s")
        )


@dataclass(frozen=True)
class IdleBaseline(Record):
    """The cluster's power at rest before a workload.

    Attributes:
        duration_s: How long it was measured.
        power_w: All nodes' mean power together (None: no node reported one).
        temperature_c: The hottest temperature any node reported.
        per_node_power_w: Node -> its mean power (None where it reported none).
    """

    duration_s: float | None
    power_w: float | None
    temperature_c: float | None = None
    per_node_power_w: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "duration_s": self.duration_s,
            "power_w": self.power_w,
            "temperature_c": self.temperature_c,
            "per_node_power_w": dict(self.per_node_power_w),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "baseline") -> IdleBaseline:
        """The inverse of ``to_json``; per-node values that are not numbers read as None."""
        f = record_fields(data, where)
        per_node = f.obj_or_none("per_node_power_w") or {}
        return cls(
            duration_s=f.number_or_none("duration_s"),
            power_w=f.number_or_none("power_w"),
            temperature_c=f.number_or_none("temperature_c"),
            per_node_power_w={
                str(node): float(power_w) if is_number(power_w) else None
                for node, power_w in per_node.items()
            },
        )


@dataclass(frozen=True)
class IdleCooldown(Record):
    """The wait after a workload for the cluster to settle.

    Attributes:
        duration_s: How long it waited.
        settled: Whether power and temperature settled before ``max_s``.
        power_w: The cluster's power at the end.
        temperature_c: The hottest temperature at the end.
        baseline_power_w: The baseline it was compared with.
        max_s: The limit of the wait.
    """

    duration_s: float | None
    settled: bool | None
    power_w: float | None
    temperature_c: float | None
    baseline_power_w: float | None = None
    max_s: float | None = None

    def to_json(self) -> JsonObject:
        """The record as written."""
        return {
            "duration_s": self.duration_s,
            "settled": self.settled,
            "power_w": self.power_w,
            "temperature_c": self.temperature_c,
            "baseline_power_w": self.baseline_power_w,
            "max_s": self.max_s,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "cooldown") -> IdleCooldown:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(
            duration_s=f.number_or_none("duration_s"),
            settled=f.flag_or_none("settled"),
            power_w=f.number_or_none("power_w"),
            temperature_c=f.number_or_none("temperature_c"),
            baseline_power_w=f.number_or_none("baseline_power_w"),
            max_s=f.number_or_none("max_s"),
        )


def _baseline(f: Fields, where: str) -> IdleBaseline | None:
    value = f.obj_or_none("baseline")
    return None if value is None else IdleBaseline.from_json(value, f"{where}: baseline")


def _cooldown(f: Fields, where: str) -> IdleCooldown | None:
    value = f.obj_or_none("cooldown")
    return None if value is None else IdleCooldown.from_json(value, f"{where}: cooldown")


@dataclass(frozen=True)
class IdleRecord(Record):
    """The idle phases around a workload (``idle.json``); absent phases are None."""

    baseline: IdleBaseline | None = None
    cooldown: IdleCooldown | None = None

    def to_json(self) -> JsonObject:
        """The record as written: only the phases that ran."""
        out: JsonObject = {}
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        if self.cooldown is not None:
            out["cooldown"] = self.cooldown.to_json()
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "idle.json") -> IdleRecord:
        """The inverse of ``to_json``."""
        f = record_fields(data, where)
        return cls(_baseline(f, where), _cooldown(f, where))


@dataclass(frozen=True)
class ProfileRunRecord(Record):
    """One run of a sweep, as ``rtk profile`` records it (``profile_run.json``).

    Attributes:
        run_id: ``<config_id>#<repeat>``.
        config_id: The configuration it is a repeat of.
        axes: Axis name -> value, as the experiment gave it.
        repeat: Which repeat of the configuration.
        status: ``running``, ``succeeded``, ``failed`` or ``interrupted``.
        error: Why it failed.
        run_dir: Its run directory, as the runner named it.
        started_wall_s: When it started (wall clock).
        ended_wall_s: When it ended.
        baseline: The idle baseline before it (from ``idle.json``).
        cooldown: The cooldown after it (from ``idle.json``).
        gpu_settings: Node -> the GPU settings applied there for it, when any were.
    """

    run_id: str
    config_id: str
    axes: JsonObject
    repeat: int
    status: str
    error: str | None = None
    run_dir: str | None = None
    started_wall_s: float | None = None
    ended_wall_s: float | None = None
    baseline: IdleBaseline | None = None
    cooldown: IdleCooldown | None = None
    gpu_settings: Mapping[str, NodeGpuSettings] | None = None

    def to_json(self) -> JsonObject:
        """The record as written."""
        out: JsonObject = {
            "v": SCHEMA_VERSION,
            "run_id": self.run_id,
            "config_id": self.config_id,
            "axes": self.axes,
            "repeat": self.repeat,
            "status": self.status,
            "error": self.error,
            "run_dir": self.run_dir,
            "started_wall_s": self.started_wall_s,
            "ended_wall_s": self.ended_wall_s,
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "cooldown": None if self.cooldown is None else self.cooldown.to_json(),
        }
        if self.gpu_settings is not None:
            out["gpu_settings"] = {n: s.to_json() for n, s in self.gpu_settings.items()}
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "profile_run.json") -> ProfileRunRecord:
        """The inverse of ``to_json``; a repeat that is not an integer reads as 0."""
        f = record_fields(data, where)
        check_version(f, SCHEMA_VERSION)
        repeat = f.data.get("repeat", 0)
        return cls(
            run_id=f.text("run_id"),
            config_id=f.text("config_id"),
            axes=cast(JsonObject, f.obj("axes")),  # read from the JSON file as it is
            repeat=repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else 0,
            status=f.text("status"),
            error=None if f.data.get("error") is None else str(f.data["error"]),
            run_dir=f.text_or_none("run_dir"),
            started_wall_s=f.number_or_none("started_wall_s"),
            ended_wall_s=f.number_or_none("ended_wall_s"),
            baseline=_baseline(f, where),
            cooldown=_cooldown(f, where),
            gpu_settings=_gpu_settings(f),
        )


def _gpu_settings(f: Fields) -> dict[str, NodeGpuSettings] | None:
    if f.nested_or_none("gpu_settings") is None:
        return None
    return {n: NodeGpuSettings.from_fields(s) for n, s in f.children("gpu_settings").items()}
