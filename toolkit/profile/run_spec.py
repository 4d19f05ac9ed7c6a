"""The runs of a sweep: each configuration's axes, its id, and what it asks of the cluster.

``Experiment.runs`` (``experiment.py``) makes a ``RunSpec`` per configuration and
repeat from the experiment's checked axes; the sweep (``toolkit.flows.sweep_plan``) reads
its node count and GPU settings from it, and records its axes as given.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.errors import RtkError
from toolkit.fields import is_integer, is_number
from toolkit.json_types import JsonValue
from toolkit.rundir.gpu_settings import ClocksMhz

MAX_NAME = 200  # of a run directory's name before "_r<repeat>"; file systems allow 255
GPU_AXES = ("power_limit_w", "gpu_clocks_mhz", "mem_clocks_mhz")


@dataclass(frozen=True)
class GpuRequest:
    """The GPU settings a run asks for: its GPU axes (None: left as they are).

    Attributes:
        power_limit_w: The ``power_limit_w`` axis.
        gpu_clocks_mhz: The ``gpu_clocks_mhz`` axis, as (min, max).
        mem_clocks_mhz: The ``mem_clocks_mhz`` axis, as (min, max).
    """

    power_limit_w: float | None = None
    gpu_clocks_mhz: ClocksMhz | None = None
    mem_clocks_mhz: ClocksMhz | None = None


@dataclass(frozen=True)
class RunSpec:
    """One run of the sweep: a configuration and its repeat number.

    Attributes:
        config_id: The configuration's id (its axes and values).
        axes: Axis name -> value, as the experiment gave it (JSON data).
        repeat: Which repeat of the configuration.
        nodes: The ``nodes`` axis: how many of the inventory's nodes; None: all.
        gpu: The GPU settings its axes ask for.
    """

    config_id: str
    axes: dict[str, JsonValue]
    repeat: int
    nodes: int | None = None
    gpu: GpuRequest = GpuRequest()

    @classmethod
    def of(cls, axes: dict[str, JsonValue], repeat: int) -> RunSpec:
        """The run of one configuration's axes (checked by ``load_experiment``).

        Raises:
            RtkError: A cluster axis holds a value it cannot (the experiment refuses those).
        """
        nodes = axes.get("nodes")
        if nodes is not None and not is_integer(nodes):
            raise RtkError(f"axis nodes: got {nodes!r}; node counts are whole numbers")
        power = axes.get("power_limit_w")
        if power is not None and not is_number(power):
            raise RtkError(f"axis power_limit_w: got {power!r}; a power limit is watts")
        gpu = GpuRequest(
            power_limit_w=power,
            gpu_clocks_mhz=clocks_mhz(axes.get("gpu_clocks_mhz")),
            mem_clocks_mhz=clocks_mhz(axes.get("mem_clocks_mhz")),
        )
        return cls(config_id(axes), axes, repeat, nodes, gpu)

    @property
    def run_id(self) -> str:
        """``batch_size=8,nodes=2#1``."""
        return f"{self.config_id}#{self.repeat}"

    @property
    def gpu_axes(self) -> str:
        """``power_limit_w=300, gpu_clocks_mhz=[1200, 1400]``: its GPU axes as written."""
        return ", ".join(f"{k}={self.axes[k]}" for k in GPU_AXES if self.axes.get(k) is not None)

    @property
    def dir_name(self) -> str:
        """A directory name for the run: the id with unsafe characters replaced.

        An id too long for one path component is cut and ends in a hash of the whole.
        """
        name = safe_name(self.config_id)
        if len(name) > MAX_NAME:
            digest = hashlib.sha256(self.config_id.encode()).hexdigest()[:12]
            name = f"{name[: MAX_NAME - 13]}_{digest}"
        return f"{name}_r{self.repeat}"


def config_id(axes: Mapping[str, object]) -> str:
    """``batch_size=8,nodes=2``: the axes and values, in the file's order."""
    return ",".join(f"{k}={value_text(v)}" for k, v in axes.items()) or "default"


def clocks_mhz(value: object) -> ClocksMhz | None:
    """``1400`` or ``[1200, 1400]`` as (min, max) MHz; None stays None.

    Raises:
        RtkError: Neither a number nor a pair of numbers.
    """
    if value is None:
        return None
    if is_number(value):
        return int(value), int(value)
    if isinstance(value, list | tuple) and len(value) == 2 and all(map(is_number, value)):
        return int(value[0]), int(value[1])
    raise RtkError(f"clocks are MHz, one value or [min, max]; got {value!r}")


def safe_name(text: str) -> str:
    """``text`` with every run of characters unsafe in a file name replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9._=,-]+", "_", text)


def value_text(value: object) -> str:
    """An axis value as ids show it: a list's items joined by ``-``."""
    if isinstance(value, list | tuple):
        return "-".join(str(v) for v in value)
    return str(value)
