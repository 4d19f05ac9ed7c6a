"""``state.json``: what ``rtk up`` and the commands after it record about a cluster.

One typed record, read and written only by ``toolkit.state.store.StateStore``; every
other module uses its fields. Fields are read with ``toolkit.fields.Fields``; a field
of the wrong type is a ``StateError`` naming it.

Older and newer rtk versions share the file, so two things are deliberate:

- keys this rtk does not know are kept as they were read (``other``) and written back,
  so a command of this rtk never drops what another version recorded;
- an ``excluded`` entry this rtk cannot read is skipped, as a missing one would be
  (the exclusions only narrow what later commands expect).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from toolkit.errors import RunDirError, StateError
from toolkit.fields import MISSING, Errors, FieldPath, Fields, Words
from toolkit.json_types import JsonObject
from toolkit.rundir.preflight import Exclusion

FILE_NAME = "state.json"


class StateErrors(Errors):
    """Errors for the fields of ``state.json``: ``WHERE: KEY: expected X, got VALUE``."""

    words: ClassVar[Words] = Words(
        root="a JSON object", text="text", text_or_null="text or null", texts="a list of text"
    )

    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, path: FieldPath, expected: str, value: Any) -> StateError:
        """``WHERE: KEY: expected EXPECTED, got VALUE`` (a missing value shows as None)."""
        keys = "".join(f": {key}" for key in path)
        given = None if value is MISSING else value
        return StateError(f"{self.where}{keys}: expected {expected}, got {given!r}")


@dataclass(frozen=True)
class RecordedRun:
    """A training run on the cluster, recorded for ``rtk train --resume``.

    Attributes:
        run_id: The run's id.
        run_dir: Its run directory, as the job was given it.
        at_wall_s: When it was submitted (wall clock, seconds since the epoch).
    """

    run_id: str
    run_dir: str
    at_wall_s: float

    def to_json(self) -> JsonObject:
        """The entry as written."""
        return {"run_id": self.run_id, "run_dir": self.run_dir, "at": self.at_wall_s}

    @classmethod
    def from_json(cls, f: Fields) -> RecordedRun:
        """The inverse of ``to_json``."""
        return cls(f.text("run_id"), f.text("run_dir"), f.number("at"))


@dataclass(frozen=True)
class ClusterState:
    """One cluster's ``state.json``; every field may be absent (a run recorded before any up).

    Attributes:
        cluster: The inventory's name, at the last ``rtk up``.
        source: The inventory it was brought up from (a path, or the embedded one).
        head: The head node's name.
        dashboard_url: Ray's dashboard (and Jobs API) on the head.
        temp_dir: Ray's temp dir on the nodes.
        nodes: The nodes of the plan brought up.
        excluded: The inventory's nodes left out, and why (read back by status,
            train and preflight until ``rtk down``).
        up_at_wall_s: When the bring-up ended (wall clock).
        nodes_rtk_digest: The digest of the rtk source every node imported, when all
            of them imported this machine's (``toolkit.jobs.shipped_code``).
        runs: Training runs, oldest first (``rtk train --resume`` takes the last).
        other: Keys this rtk does not know, kept as read and written back.
    """

    KNOWN: ClassVar[frozenset[str]] = frozenset(
        {"cluster", "source", "head", "dashboard_url", "temp_dir", "nodes", "excluded"}
        | {"up_at", "nodes_rtk_digest", "runs"}
    )

    cluster: str | None = None
    source: str | None = None
    head: str | None = None
    dashboard_url: str | None = None
    temp_dir: str | None = None
    nodes: tuple[str, ...] = ()
    excluded: tuple[Exclusion, ...] = ()
    up_at_wall_s: float | None = None
    nodes_rtk_digest: str | None = None
    runs: tuple[RecordedRun, ...] = ()
    other: JsonObject = field(default_factory=dict)

    @property
    def last_run(self) -> RecordedRun | None:
        """The run recorded last, if any."""
        return self.runs[-1] if self.runs else None

    def with_run(self, run: RecordedRun) -> ClusterState:
        """This state with ``run`` recorded last (an earlier entry of its id dropped)."""
        kept = tuple(r for r in self.runs if r.run_id != run.run_id)
        return dataclasses.replace(self, runs=(*kept, run))

    def to_json(self) -> JsonObject:
        """The record as written: unknown keys as read, then the known ones set."""
        scalars = {
            "cluster": self.cluster,
            "source": self.source,
            "head": self.head,
            "dashboard_url": self.dashboard_url,
            "temp_dir": self.temp_dir,
            "up_at": self.up_at_wall_s,
            "nodes_rtk_digest": self.nodes_rtk_digest,
        }
        return (
            dict(self.other)
            | {key: value for key, value in scalars.items() if value is not None}
            | {
                "nodes": list(self.nodes),
                "excluded": [e.to_json() for e in self.excluded],
                "runs": [r.to_json() for r in self.runs],
            }
        )

    @classmethod
    def from_json(cls, data: object, where: str = FILE_NAME) -> ClusterState:
        """The inverse of ``to_json``.

        Raises:
            StateError: ``data`` is not an object, or a known field has the wrong type.
        """
        f = Fields(data, StateErrors(where))
        runs = f.data.get("runs")
        if runs is not None and not isinstance(runs, list):
            raise f.fail("runs", "a list of runs")
        return cls(
            cluster=f.text_or_none("cluster"),
            source=f.text_or_none("source"),
            head=f.text_or_none("head"),
            dashboard_url=f.text_or_none("dashboard_url"),
            temp_dir=f.text_or_none("temp_dir"),
            nodes=f.texts("nodes"),
            excluded=_exclusions(f.data.get("excluded"), where),
            up_at_wall_s=f.number_or_none("up_at"),
            nodes_rtk_digest=f.text_or_none("nodes_rtk_digest"),
            runs=tuple(
                RecordedRun.from_json(Fields(run, f.errors, ("runs", i)))
                for i, run in enumerate(runs or [])
            ),
            other={k: v for k, v in f.data.items() if k not in cls.KNOWN},
        )


def _exclusions(value: object, where: str) -> tuple[Exclusion, ...]:
    """The readable entries of ``excluded``; the rest are skipped (module docstring)."""
    if not isinstance(value, list):
        return ()
    found = []
    for item in value:
        try:
            found.append(Exclusion.from_json(item, f"{where}: excluded"))
        except RunDirError:
            continue
    return tuple(found)
