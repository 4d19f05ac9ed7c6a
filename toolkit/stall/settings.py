"""How a run is watched for stalls: the policy and timeouts a user chose (no Ray here).

``--on-stall`` and ``--stall-timeout-s`` of ``rtk train`` and ``rtk torchrun`` become a
``WatchSettings`` in the job's configuration; the job driver's watchdog
(``toolkit.stall.watchdog``) reads it. ``rtk stall-check``'s options become a
``CheckOptions``, the argument of its job (``toolkit.stall.check_job``). Kept apart so
the CLI can build them without importing Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.json_types import JsonObject
from toolkit.stall.detector import FLOOR_S, STARTUP_TIMEOUT_S

# Each node's time to give its evidence (the watchdog's collection).
PER_NODE_TIMEOUT_S = 10.0

REPORT, ABORT, RESTART_EXCLUDING = "report", "abort", "restart-excluding"
POLICIES = (REPORT, ABORT, RESTART_EXCLUDING)
# The driver's exit status after a stall it stopped (EX_TEMPFAIL: try again, elsewhere).
STALL_EXIT = 75


@dataclass(frozen=True)
class WatchSettings:
    """How a run is watched (``--on-stall``, ``--stall-timeout-s``).

    Attributes:
        policy: One of ``POLICIES``.
        timeout_s: A fixed stall timeout (None: learned from the run's steps).
        startup_timeout_s: The timeout before the run's step time is known.
        per_node_timeout_s: How long each node may take to give its evidence.
        floor_s: The least a learned timeout may be.
    """

    policy: str = REPORT
    timeout_s: float | None = None
    floor_s: float = FLOOR_S
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    per_node_timeout_s: float = PER_NODE_TIMEOUT_S

    def to_json(self) -> JsonObject:
        """A JSON-ready object (part of a job's configuration)."""
        return {
            "policy": self.policy,
            "timeout_s": self.timeout_s,
            "floor_s": self.floor_s,
            "startup_timeout_s": self.startup_timeout_s,
            "per_node_timeout_s": self.per_node_timeout_s,
        }

    @classmethod
    def from_json(cls, data: object) -> WatchSettings:
        """The inverse of ``to_json`` (missing keys: the defaults).

        Raises:
            ValueError: An unknown policy, or a timeout that is not positive.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"stall settings: expected an object, got {data!r}")
        settings = cls(
            policy=str(data.get("policy", REPORT)),
            timeout_s=_positive_or_none(data.get("timeout_s")),
            floor_s=_positive_or_none(data.get("floor_s", FLOOR_S)) or FLOOR_S,
            startup_timeout_s=float(data.get("startup_timeout_s", STARTUP_TIMEOUT_S)),
            per_node_timeout_s=float(data.get("per_node_timeout_s", PER_NODE_TIMEOUT_S)),
        )
        if settings.policy not in POLICIES:
            raise ValueError(f"--on-stall {settings.policy}: choose {', '.join(POLICIES)}")
        return settings


def _positive_or_none(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"--stall-timeout-s must be a positive number of seconds, got {value!r}")
    return float(value)


# rtk stall-check's job: its module, what its lines start with, the action it records.
CHECK_MODULE = "toolkit.stall.check_job"
CHECK_PREFIX = "rtk stall-check: "  # each line it prints for the user
CHECK_RECORD_PREFIX = "rtk-stall-check-record: "  # the line with the record (--json)
CHECK_REFUSED = "cannot check "  # how its line begins when it could not check (exit 1)
CHECK = "check"  # its records' action in stall.json


@dataclass(frozen=True)
class CheckOptions:
    """What ``rtk stall-check`` asks its job (``python -m toolkit.stall.check_job JSON``).

    Attributes:
        run_dir: The run directory, as the nodes see it (``~`` is the head's home).
        per_node_timeout_s: How long each node may take to give its evidence.
        as_json: Print the record too, on the line after ``CHECK_RECORD_PREFIX``.
    """

    run_dir: str
    per_node_timeout_s: float = PER_NODE_TIMEOUT_S
    as_json: bool = False

    def to_json(self) -> JsonObject:
        """The job's argument, as a JSON-ready object."""
        return {
            "run_dir": self.run_dir,
            "per_node_timeout_s": self.per_node_timeout_s,
            "json": self.as_json,
        }

    @classmethod
    def from_json(cls, data: object) -> CheckOptions:
        """The inverse of ``to_json`` (missing keys but ``run_dir``: the defaults).

        Raises:
            ValueError: No run directory, or a timeout that is not positive.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"stall-check options: expected an object, got {data!r}")
        run_dir = data.get("run_dir")
        if not isinstance(run_dir, str) or not run_dir:
            raise ValueError(f"stall-check options: run_dir must be a path, got {run_dir!r}")
        timeout = data.get("per_node_timeout_s", PER_NODE_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(
                f"--per-node-timeout-s must be a positive number of seconds, got {timeout!r}"
            )
        return cls(run_dir, float(timeout), data.get("json") is True)
