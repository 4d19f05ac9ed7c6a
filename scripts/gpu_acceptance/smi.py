"""nvidia-smi as the peer: its query fields, its CSV, its ``-q`` text, read defensively.

nvidia-smi's field names and ``-q`` labels change between drivers (``power.draw``
became an average beside ``power.draw.instant``; "Power Limit" became "Current Power
Limit"), so callers ask which fields this nvidia-smi knows (``query_fields``) and pick
among candidates (``pick``); units come from the CSV header, not from assumptions.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from typing import Any

from gpu_acceptance import procs

MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu lost]"}
# CSV header units -> (SI unit, factor).
UNITS = {"mJ": ("J", 1e-3), "J": ("J", 1.0), "W": ("W", 1.0), "mW": ("W", 1e-3)}
ENERGY_FIELDS = ("total_energy_consumption",)
POWER_FIELDS = ("power.draw.instant", "power.draw", "power.draw.average")


def query_fields(help_text: str) -> set[str]:
    """The field names ``nvidia-smi --help-query-gpu`` lists.

    Each property starts a line with its quoted name, sometimes with aliases:
    ``"pci.bus_id" or "gpu_bus_id"``; descriptions never start with a quote.
    """
    names: set[str] = set()
    for line in help_text.splitlines():
        if line.startswith('"'):
            names.update(re.findall(r'"([^"\s]+)"', line))
    return names


def pick(available: Iterable[str], candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` that nvidia-smi knows."""
    known = set(available)
    return next((c for c in candidates if c in known), None)


def parse_csv(text: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of ``--query-gpu=... --format=csv,nounits`` output, and each field's unit.

    The header names each field, with its unit in brackets (``power.draw [W]``). Values
    that parse as numbers become floats; "[N/A]", "[Not Supported]" and the like become
    None; everything else stays text. Repeated headers (``-lms`` prints one) are skipped.
    """
    rows: list[dict[str, Any]] = []
    header: list[str] = []
    units: dict[str, str] = {}
    for record in csv.reader(io.StringIO(text), skipinitialspace=True):
        cells = [c.strip() for c in record]
        if not cells or cells == [""]:
            continue
        if cells[0].split(" [")[0] == "timestamp" or not header and _looks_like_header(cells):
            header = []
            for cell in cells:
                name, _, unit = cell.partition(" [")
                header.append(name.strip())
                if unit:
                    units[name.strip()] = unit.rstrip("]").strip()
            continue
        if not header or len(cells) != len(header):
            continue
        rows.append({name: _value(cell) for name, cell in zip(header, cells, strict=True)})
    return rows, units


def _looks_like_header(cells: list[str]) -> bool:
    return all(re.fullmatch(r"[a-z_][a-z0-9_.]*( \[.*\])?", c) for c in cells)


def _value(cell: str) -> Any:
    if cell.lower() in MISSING:
        return None
    try:
        return float(cell)
    except ValueError:
        return cell


def in_si(value: Any, unit: str | None) -> float | None:
    """``value`` in joules or watts, from the unit the header gave (None stays None)."""
    if not isinstance(value, float):
        return None
    _, factor = UNITS.get(unit or "", ("", 1.0))
    return value * factor


def parse_timestamp(text: str) -> float | None:
    """nvidia-smi's ``timestamp`` (local time, ``2026/11/23 10:00:01.250``) as epoch seconds."""
    match = re.fullmatch(r"(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?", text)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = float(f"0.{match.group(7)}") if match.group(7) else 0.0
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1)) + fraction


def parse_q(text: str) -> dict[str, Any]:
    """``nvidia-smi -q`` text as nested dicts, one per GPU under ``gpus`` (by bus id).

    Lines ``Label : value`` are leaves; a line with no colon opens a section that holds
    the lines indented below it. A section that appears twice keeps its first reading
    and the second goes under ``Label #2``.
    """
    top: dict[str, Any] = {"gpus": {}}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, top)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1] if stack else top
        if indent == 0 and re.fullmatch(r"GPU [0-9A-Fa-f:.]+", line):
            section: dict[str, Any] = {}
            top["gpus"][line[4:].strip()] = section
            stack = [(-1, top), (indent, section)]
        elif " : " in line or line.endswith(":"):
            key, _, value = line.partition(" : ") if " : " in line else line.partition(":")
            parent[key.strip()] = value.strip()
        else:
            name = line
            while name in parent:
                name = _next_name(name)
            section = {}
            parent[name] = section
            stack.append((indent, section))
    return top


def _next_name(name: str) -> str:
    base, _, number = name.partition(" #")
    return f"{base} #{int(number) + 1 if number.isdigit() else 2}"


def number(text: Any) -> float | None:
    """The number at the start of ``700.00 W``, ``1980 MHz``; None for N/A."""
    if not isinstance(text, str):
        return None
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def power_and_clocks(q: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per GPU (bus id): power limits and clocks from ``nvidia-smi -q -d POWER,CLOCK``."""
    found: dict[str, dict[str, float | None]] = {}
    for bus_id, gpu in q.get("gpus", {}).items():
        power = gpu.get("GPU Power Readings") or gpu.get("Power Readings") or {}
        clocks = gpu.get("Clocks") or {}
        max_clocks = gpu.get("Max Clocks") or {}
        found[bus_id] = {
            "power_limit_w": number(power.get("Current Power Limit", power.get("Power Limit"))),
            "default_power_limit_w": number(power.get("Default Power Limit")),
            "min_power_limit_w": number(power.get("Min Power Limit")),
            "max_power_limit_w": number(power.get("Max Power Limit")),
            "power_draw_w": number(
                power.get("Instantaneous Power Draw")
                or power.get("Power Draw")
                or power.get("Average Power Draw")
            ),
            "sm_clock_mhz": number(clocks.get("SM")),
            "mem_clock_mhz": number(clocks.get("Memory")),
            "max_sm_clock_mhz": number(max_clocks.get("SM")),
        }
    return found


# -- running it -----------------------------------------------------------------------


def available() -> bool:
    """Whether nvidia-smi is on PATH."""
    return shutil.which("nvidia-smi") is not None


def help_fields(timeout_s: float = 20.0) -> set[str]:
    """The query fields this nvidia-smi knows (empty when it does not answer)."""
    done = procs.run(["nvidia-smi", "--help-query-gpu"], timeout_s)
    return query_fields(done.stdout) if done.ok else set()


def query(fields: Sequence[str], timeout_s: float = 20.0) -> list[dict[str, Any]]:
    """One ``--query-gpu`` reading of every GPU; values in the header's units.

    Raises:
        RuntimeError: nvidia-smi failed.
    """
    done = procs.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,nounits"], timeout_s
    )
    if not done.ok:
        raise RuntimeError(done.why())
    rows, _ = parse_csv(done.stdout)
    return rows


def q_text(sections: str = "POWER,CLOCK", timeout_s: float = 20.0) -> str:
    """``nvidia-smi -q -d SECTIONS``.

    Raises:
        RuntimeError: nvidia-smi failed.
    """
    done = procs.run(["nvidia-smi", "-q", "-d", sections], timeout_s)
    if not done.ok:
        raise RuntimeError(done.why())
    return done.stdout
