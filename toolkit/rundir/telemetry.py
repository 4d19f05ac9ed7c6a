"""The telemetry manifest (``telemetry/manifest.json``): sample rates, nodes, clock offsets.

The telemetry session writes it (twice: when sampling starts, and after collecting);
the report reads it. Reading is lenient where a run's telemetry is partial (a lost
node, a clock never measured): what was assumed goes into ``notes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toolkit.errors import RunDirError
from toolkit.fields import is_integer, is_number
from toolkit.json_types import JsonObject
from toolkit.rundir.devices import DeviceInfo, device_info
from toolkit.rundir.record_base import Record, record_fields

MANIFEST_VERSION = 1


def _number(value: object) -> float | None:
    return float(value) if is_number(value) else None


def _positive(value: object) -> float | None:
    number = _number(value)
    return number if number is not None and number > 0 else None


def _integer(value: object) -> int | None:
    return value if is_integer(value) else None


@dataclass(frozen=True)
class ClockOffset:
    """One estimate of a node's wall clock minus the head's, in seconds.

    Attributes:
        offset_s: The median offset over the rounds.
        uncertainty_s: Half the median round trip.
        rounds: The round trips it took.
        rtt_min_s: The shortest of them.
    """

    offset_s: float
    uncertainty_s: float
    rounds: int
    rtt_min_s: float

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "offset_s": self.offset_s,
            "uncertainty_s": self.uncertainty_s,
            "rounds": self.rounds,
            "rtt_min_s": self.rtt_min_s,
        }

    @classmethod
    def from_json(cls, data: object) -> ClockOffset | None:
        """The inverse of ``to_json``; None unless ``data`` holds a whole estimate."""
        if not isinstance(data, Mapping):
            return None
        offset_s, uncertainty_s = _number(data.get("offset_s")), _number(data.get("uncertainty_s"))
        rounds, rtt_min_s = _integer(data.get("rounds")), _number(data.get("rtt_min_s"))
        if offset_s is None or uncertainty_s is None or rounds is None or rtt_min_s is None:
            return None
        return cls(offset_s, uncertainty_s, rounds, rtt_min_s)


@dataclass(frozen=True)
class ClockEntry:
    """A node's ``clock`` in the manifest: the offset used, and the estimates it came from.

    Attributes:
        offset_s: The mean of the estimates (0 s without one).
        uncertainty_s: Covers both estimates and the drift between them; None without
            an estimate.
        start: The estimate taken when sampling started (None: not taken).
        end: The estimate taken when it stopped (None: not taken).
    """

    offset_s: float
    uncertainty_s: float | None
    start: ClockOffset | None
    end: ClockOffset | None

    @property
    def measured(self) -> bool:
        """Whether either estimate was taken."""
        return self.start is not None or self.end is not None

    def to_json(self) -> JsonObject:
        """As written: both estimates, null where not taken."""
        return {
            "offset_s": self.offset_s,
            "uncertainty_s": self.uncertainty_s,
            "start": None if self.start is None else self.start.to_json(),
            "end": None if self.end is None else self.end.to_json(),
        }


@dataclass(frozen=True)
class SamplerStop:
    """What a node's sampler counted, as it said when it stopped.

    Attributes:
        ticks: Its ticks.
        late_ticks: The times it fell behind (missed ticks skipped).
        energy_reads: The readings that read the energy counters.
        errors: Sensor readings that failed.
        last_error: The last of those failures.
    """

    ticks: int
    late_ticks: int
    energy_reads: int
    errors: int
    last_error: str | None


@dataclass(frozen=True)
class SamplerSummary:
    """The manifest's ``sampler``: what a node's sampler wrote, and what was collected.

    Attributes:
        samples: The samples (collected, else as the sampler counted them).
        first_wall_s: The first sample's wall time.
        last_wall_s: The last sample's wall time.
        stop: The sampler's own counts when it stopped (None: it never said).
        truncated: What reading the node's live files found cut or damaged.
    """

    samples: int
    first_wall_s: float | None
    last_wall_s: float | None
    stop: SamplerStop | None = None
    truncated: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        """As written: the sampler's statistics in their order, ``truncated`` when any."""
        out: JsonObject = {"samples": self.samples}
        stop = self.stop
        if stop is not None:
            out.update(
                ticks=stop.ticks,
                late_ticks=stop.late_ticks,
                energy_reads=stop.energy_reads,
                errors=stop.errors,
            )
        out.update(first_wall_s=self.first_wall_s, last_wall_s=self.last_wall_s)
        if stop is not None:
            out["last_error"] = stop.last_error
        if self.truncated:
            out["truncated"] = list(self.truncated)
        return out

    @classmethod
    def from_json(cls, data: object) -> SamplerSummary | None:
        """The inverse of ``to_json``; None when ``data`` is no object.

        Lenient, as the manifest is: counts that are missing or wrong read as 0 and the
        stop statistics as None unless all of their counts are there.
        """
        if not isinstance(data, Mapping):
            return None
        counts = [_integer(data.get(k)) for k in ("ticks", "late_ticks", "energy_reads", "errors")]
        stop = None
        if all(c is not None for c in counts):
            ticks, late, energy, errors = (c or 0 for c in counts)
            last_error = data.get("last_error")
            stop = SamplerStop(
                ticks, late, energy, errors, None if last_error is None else str(last_error)
            )
        truncated = data.get("truncated")
        return cls(
            samples=_integer(data.get("samples")) or 0,
            first_wall_s=_number(data.get("first_wall_s")),
            last_wall_s=_number(data.get("last_wall_s")),
            stop=stop,
            truncated=tuple(str(t) for t in truncated) if isinstance(truncated, list) else (),
        )


@dataclass(frozen=True)
class NodeManifest(Record):
    """One node's entry in the manifest.

    Attributes:
        name: The node's key in the manifest (the directory under ``telemetry/nodes``).
        hostname: Its hostname (markers may name a node by either).
        offset_s: The node's wall clock minus the head's.
        uncertainty_s: Half the median round trip of the offset estimate.
        status: ``starting``, ``running``, ``complete``, ``lost`` or ``missing``.
        devices: Device key -> what its sensor said about it.
        samples_expected: The sample count the collector reported, when known.
        error: Why the sampler failed, when it did.
        node_id: Its Ray node id.
        pid: The sampler's process id.
        sensors: The sensors the sampler opened.
        clock: The offset and the estimates it came from; None: written without
            them (``offset_s`` and ``uncertainty_s`` alone).
        first_wall_s: The first sample's wall time.
        last_wall_s: The last sample's wall time.
        sampler: The sampler's statistics when it stopped.
    """

    name: str
    hostname: str
    offset_s: float
    uncertainty_s: float
    status: str
    devices: Mapping[str, DeviceInfo]
    samples_expected: int | None
    error: str | None
    node_id: str | None = None
    pid: int | None = None
    sensors: tuple[str, ...] = ()
    clock: ClockEntry | None = None
    first_wall_s: float | None = None
    last_wall_s: float | None = None
    sampler: SamplerSummary | None = None

    def to_json(self) -> JsonObject:
        """The entry as written (its name is its key in ``nodes``)."""
        clock = self.clock
        return {
            "hostname": self.hostname,
            "node_id": self.node_id,
            "pid": self.pid,
            "sensors": list(self.sensors),
            "devices": {key: info.to_json() for key, info in self.devices.items()},
            "clock": (
                {"offset_s": self.offset_s, "uncertainty_s": self.uncertainty_s}
                if clock is None
                else clock.to_json()
            ),
            "status": self.status,
            "samples": self.samples_expected,
            "first_wall_s": self.first_wall_s,
            "last_wall_s": self.last_wall_s,
            "sampler": None if self.sampler is None else self.sampler.to_json(),
            "error": self.error,
        }

    @classmethod
    def from_json(
        cls,
        data: object,
        where: str = "node",
        *,
        name: str = "",
        is_head: bool = False,
        notes: list[str] | None = None,
    ) -> NodeManifest:
        """The entry as read; what is missing is assumed and said in ``notes``.

        A ``clock`` without ``start`` and ``end`` (the offset alone) reads as ``clock``
        None, its offset in ``offset_s`` and ``uncertainty_s``.
        """
        notes = [] if notes is None else notes
        entry: Mapping[str, object] = data if isinstance(data, Mapping) else {}
        name = name or where
        found = entry.get("clock")
        clock: Mapping[str, object] | None = found if isinstance(found, Mapping) else None
        offset_s = _number(clock.get("offset_s")) if clock else None
        if offset_s is None and not is_head:
            notes.append(f"node {name}: no clock offset in the manifest; 0 s assumed")
        elif (
            not is_head
            and clock
            and "start" in clock
            and not clock.get("start")
            and not clock.get("end")
        ):
            notes.append(f"node {name}: its clock offset was never measured; 0 s assumed")
        uncertainty_s = _number(clock.get("uncertainty_s")) if clock else None
        entry_clock = None
        if clock is not None and ("start" in clock or "end" in clock):
            entry_clock = ClockEntry(
                offset_s or 0.0,
                uncertainty_s,
                ClockOffset.from_json(clock.get("start")),
                ClockOffset.from_json(clock.get("end")),
            )
        devices = entry.get("devices")
        if not isinstance(devices, Mapping):
            devices = {}
        expected, pid, sensors = entry.get("samples"), entry.get("pid"), entry.get("sensors")
        return cls(
            name=name,
            hostname=str(entry.get("hostname") or name),
            offset_s=offset_s or 0.0,
            uncertainty_s=uncertainty_s or 0.0,
            status=str(entry.get("status") or "unknown"),
            devices={str(k): device_info(str(k), v) for k, v in devices.items()},
            samples_expected=expected if isinstance(expected, int) else None,
            error=None if entry.get("error") is None else str(entry["error"]),
            node_id=None if entry.get("node_id") is None else str(entry["node_id"]),
            pid=pid if isinstance(pid, int) else None,
            sensors=tuple(str(s) for s in sensors) if isinstance(sensors, list) else (),
            clock=entry_clock,
            first_wall_s=_number(entry.get("first_wall_s")),
            last_wall_s=_number(entry.get("last_wall_s")),
            sampler=SamplerSummary.from_json(entry.get("sampler")),
        )

    @classmethod
    def unlisted(cls, name: str) -> NodeManifest:
        """A node with samples but no manifest entry: offset 0 s, status unknown."""
        return cls(name, name, 0.0, 0.0, "unknown", {}, None, None)


def is_node_dir_name(name: str) -> bool:
    """Whether ``name`` can be a node's one directory under ``telemetry/nodes/``.

    Node names are host names, so a manifest naming ``../..``, ``a/b`` or 300
    characters is damaged or hostile: its traces would be read from elsewhere, or the
    file system refuses the path (ENAMETOOLONG).
    """
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and name.isprintable()
        and len(name.encode("utf-8", "surrogatepass")) <= 255
    )


@dataclass(frozen=True)
class Manifest(Record):
    """The telemetry manifest: sample rates and the nodes.

    Attributes:
        head: The node whose clock is the report's timeline.
        rate_hz: Full readings per second.
        power_rate_hz: Fast instant-power readings per second.
        nodes: Node name -> its entry.
        run_dir: The run directory as the session named it.
        started_wall_s: When sampling started (None before it did).
        ended_wall_s: When it stopped (None while it runs).
    """

    head: str
    rate_hz: float
    power_rate_hz: float
    nodes: dict[str, NodeManifest]
    run_dir: str | None = None
    started_wall_s: float | None = None
    ended_wall_s: float | None = None
    notes: list[str] = field(default_factory=list, compare=False, repr=False)

    def to_json(self) -> JsonObject:
        """The manifest as written."""
        return {
            "v": MANIFEST_VERSION,
            "run_dir": self.run_dir,
            "head": self.head,
            "rate_hz": self.rate_hz,
            "power_rate_hz": self.power_rate_hz,
            "started_wall_s": self.started_wall_s,
            "ended_wall_s": self.ended_wall_s,
            "nodes": {name: node.to_json() for name, node in self.nodes.items()},
        }

    @classmethod
    def from_json(cls, data: object, where: str = "telemetry/manifest.json") -> Manifest:
        """The manifest as read; what was assumed is in ``notes``.

        Raises:
            RunDirError: It is not a manifest (no ``nodes`` object).
        """
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
            raise RunDirError(f"{where}: not a telemetry manifest (no `nodes` object)")
        f = record_fields(data, where)
        notes: list[str] = []
        rate_hz = _positive(data.get("rate_hz"))
        if rate_hz is None:
            notes.append(f"manifest has no valid rate_hz ({data.get('rate_hz')!r}); 1 Hz assumed")
            rate_hz = 1.0
        head = str(data.get("head") or next(iter(data["nodes"]), ""))
        for name in data["nodes"]:
            if not is_node_dir_name(name):
                raise RunDirError(
                    f"{where}: nodes: {name!r} is not a node's name (each names its "
                    "directory under telemetry/nodes/)"
                )
        nodes = {
            name: NodeManifest.from_json(
                entry, f"{where}: nodes: {name}", name=name, is_head=name == head, notes=notes
            )
            for name, entry in data["nodes"].items()
        }
        return cls(
            head=head,
            rate_hz=rate_hz,
            power_rate_hz=_positive(data.get("power_rate_hz")) or rate_hz,
            nodes=nodes,
            run_dir=None if data.get("run_dir") is None else str(data["run_dir"]),
            started_wall_s=_number(f.data.get("started_wall_s")),
            ended_wall_s=_number(f.data.get("ended_wall_s")),
            notes=notes,
        )
