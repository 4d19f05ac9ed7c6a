"""Stage 3: energy truth: one loaded window measured three ways, side by side.

Under a matmul load, one window of ``--energy-seconds`` is measured by:

- rtk's sampler (10 Hz full readings, 50 Hz instant power), integrated with the
  report's own ``EnergyCurve``: the energy counter's delta and the trapezoid of the
  instant power;
- ``nvidia-smi --query-gpu=... -lms 100``: its power field integrated the same way,
  and its energy counter (``total_energy_consumption``) when this nvidia-smi has it;
- Zeus's ``ZeusMonitor`` window, when zeus imports.

Every figure is also given as a ratio to rtk's counter.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any

from gpu_acceptance import load, procs, smi
from gpu_acceptance.context import StageContext
from gpu_acceptance.samples import read_samples, series

SMI_INTERVAL_MS = 100
LEAD_S = 3.0  # load and samplers run this long before the window opens
DISAGREE = 0.05  # a source further than this from rtk's counter is a finding


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    zeus = "Zeus's ZeusMonitor" if ctx.has("zeus") else "Zeus (if it imports)"
    return (
        f"measure one {ctx.energy_s:g} s matmul window with rtk's sampler (counter and"
        f" integrated instant power), nvidia-smi -lms {SMI_INTERVAL_MS} and {zeus}; ratios"
    )


def zeus_monitor() -> tuple[Any, str | None]:
    """Zeus's ``ZeusMonitor`` class and a note; (None, why) when it does not import.

    zeus imports ``sklearn.metrics.auc`` at module level (scikit-learn and SciPy are
    too large to bring to an offline machine) and uses it only to integrate power on
    GPUs without an energy counter. Without scikit-learn, a stand-in that integrates
    with numpy's trapezoid is put in its place, and the note says so.
    """
    try:
        from zeus.monitor import ZeusMonitor

        return ZeusMonitor, None
    except ModuleNotFoundError as e:
        if e.name not in ("sklearn", "sklearn.metrics"):
            return None, f"zeus does not import: {e}"
    except Exception as e:  # noqa: BLE001 - any import failure is the reason
        return None, f"zeus does not import: {type(e).__name__}: {e}"
    import numpy as np

    metrics = types.ModuleType("sklearn.metrics")
    trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")  # noqa: B009 - numpy < 2
    metrics.auc = lambda x, y: float(trapezoid(y, x))  # type: ignore[attr-defined]
    package = types.ModuleType("sklearn")
    package.metrics = metrics  # type: ignore[attr-defined]
    sys.modules.setdefault("sklearn", package)
    sys.modules.setdefault("sklearn.metrics", metrics)
    for name in [n for n in sys.modules if n.startswith("zeus")]:
        del sys.modules[name]
    try:
        from zeus.monitor import ZeusMonitor
    except Exception as e:  # noqa: BLE001
        return None, f"zeus does not import even with a numpy stand-in for sklearn: {e}"
    return ZeusMonitor, "scikit-learn is absent: sklearn.metrics.auc was a numpy stand-in"


def curve_energy(
    t_s: list[float], values: list[float], kind: str, rate_hz: float, t0: float, t1: float
) -> dict[str, Any]:
    """Joules between ``t0`` and ``t1`` by the report's ``EnergyCurve``, and coverage."""
    import numpy as np

    from toolkit.telemetry.report.figures.curves import EnergyCurve, gap_threshold_s

    inside = [t for t in t_s if t0 <= t <= t1]
    if len(t_s) < 2:
        return {"energy_j": None, "samples": len(inside)}
    t = np.asarray(t_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if kind == "counter":
        curve, resets = EnergyCurve.from_counter(t, v, gap_threshold_s(rate_hz))
    else:
        curve, resets = EnergyCurve.from_power(t, v, gap_threshold_s(rate_hz)), 0
    energy = float(curve.energy_j(t0, t1)[0])
    covered = float(curve.covered_s(t0, t1)[0])
    return {
        "energy_j": energy,
        "mean_power_w": energy / (t1 - t0) if t1 > t0 else None,
        "covered_s": covered,
        "samples": len(inside),
        "counter_resets": resets,
    }


def smi_fields() -> tuple[list[str], str | None, str | None, list[str]]:
    """The query fields to poll, the power field, the energy field, and notes."""
    known = smi.help_fields()
    notes = []
    if not known:
        notes.append("nvidia-smi --help-query-gpu gave no fields: asking for power.draw only")
        known = {"timestamp", "index", "uuid", "power.draw"}
    power = smi.pick(known, smi.POWER_FIELDS)
    energy = smi.pick(known, smi.ENERGY_FIELDS)
    if energy is None:
        notes.append("this nvidia-smi has no total_energy_consumption field")
    fields = ["timestamp", "index", "uuid"] + [f for f in (power, energy) if f]
    return fields, power, energy, notes


def smi_series(
    path: Path, index: int, field: str | None
) -> tuple[list[float], list[float], str | None]:
    """``(t_s, value in W or J, unit)`` of ``field`` for GPU ``index`` from the polled CSV."""
    if field is None or not path.exists():
        return [], [], None
    rows, units = smi.parse_csv(path.read_text(encoding="utf-8", errors="replace"))
    points = []
    for row in rows:
        if row.get("index") != float(index):
            continue
        t = smi.parse_timestamp(str(row.get("timestamp")))
        value = smi.in_si(row.get(field), units.get(field))
        if t is not None and value is not None:
            points.append((t, value))
    points.sort()
    return [t for t, _ in points], [v for _, v in points], units.get(field)


def ratios(figures: dict[str, Any], reference: str) -> dict[str, float | None]:
    """Each source's energy over the reference source's."""
    base = (figures.get(reference) or {}).get("energy_j")
    return {
        name: (f["energy_j"] / base if base and f.get("energy_j") is not None else None)
        for name, f in figures.items()
        if name != reference
    }


def run(ctx: StageContext, io: Any) -> None:
    """Measure the window three ways and compare."""
    if not ctx.has("pynvml") or not ctx.has("torch"):
        raise io.skip("needs pynvml and torch")
    monitor_class, zeus_note = (
        zeus_monitor() if ctx.has("zeus") else (None, "zeus is not installed")
    )
    io.measure("zeus", zeus_note or "ZeusMonitor imported")
    fields, power_field, energy_field, notes = smi_fields()
    io.measure("nvidia_smi_fields", {"power": power_field, "energy": energy_field, "notes": notes})
    sampler_path = ctx.work_dir / "energy-rtk.arrows"
    smi_path = ctx.work_dir / "energy-smi.csv"
    sampler_path.unlink(missing_ok=True)
    seconds = ctx.energy_s
    matmul = load.start(ctx.python, ctx.env(), seconds + 4 * LEAD_S + 60)
    sampler = smi_poll = None
    try:
        argv = [ctx.python, "-m", "toolkit.telemetry.sampler", str(sampler_path)]
        sampler_err = ctx.work_dir / "energy-rtk.err"
        argv += ["--sensors", "nvml", "--rate-hz", "10", "--power-rate-hz", "50"]
        sampler = procs.Background(argv, env=ctx.env(), stderr_path=sampler_err)
        if sampler.wait_for("{", 60) is None:
            why = procs.last_line(sampler_err.read_text(errors="replace"))
            raise RuntimeError(f"rtk's sampler did not start: {why}")
        if smi.available():
            # Line-buffered when stdbuf is there; stopped with SIGINT, as its loop expects.
            smi_argv = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
            smi_argv += ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,nounits"]
            smi_poll = procs.Background(
                smi_argv + ["-lms", str(SMI_INTERVAL_MS)], stdout_path=smi_path
            )
        monitor = None
        if monitor_class is not None:
            try:
                monitor = monitor_class(gpu_indices=[g.index for g in ctx.gpus])
            except Exception as e:  # noqa: BLE001 - recorded; the other two still measure
                io.error(f"ZeusMonitor failed to start: {type(e).__name__}: {e}")
        time.sleep(LEAD_S)
        t0 = time.time()
        if monitor is not None:
            monitor.begin_window("acceptance", sync_execution=False)
        time.sleep(seconds)
        zeus_result = None
        if monitor is not None:
            zeus_result = monitor.end_window("acceptance", sync_execution=False)
        t1 = time.time()
        time.sleep(LEAD_S)
    finally:
        if sampler is not None:
            sampler.stop()
        if smi_poll is not None:
            smi_poll.stop(sig=signal.SIGINT)
        io.measure("load_workload", load.finish(matmul))
    io.measure("window", {"start_wall_s": t0, "end_wall_s": t1, "seconds": t1 - t0})
    rows = read_samples(sampler_path)
    per_gpu = {}
    findings = []
    for gpu in ctx.gpus:
        figures: dict[str, Any] = {
            "rtk_counter": curve_energy(
                *series(rows, gpu.uuid, "energy_j"), "counter", 10.0, t0, t1
            ),
            "rtk_power": curve_energy(*series(rows, gpu.uuid, "power_w"), "power", 50.0, t0, t1),
        }
        t, p, unit = smi_series(smi_path, gpu.index, power_field)
        figures["smi_power"] = curve_energy(t, p, "power", 10.0, t0, t1) | {
            "field": power_field,
            "unit": unit,
        }
        t, joules_series, unit = smi_series(smi_path, gpu.index, energy_field)
        if energy_field:
            figures["smi_counter"] = curve_energy(t, joules_series, "counter", 10.0, t0, t1) | {
                "unit": unit
            }
        if zeus_result is not None:
            joules = getattr(zeus_result, "gpu_energy", {}).get(gpu.index)
            figures["zeus"] = {"energy_j": joules, "window_s": getattr(zeus_result, "time", None)}
        per_gpu[gpu.uuid] = {"figures": figures, "over_rtk_counter": ratios(figures, "rtk_counter")}
        for source, ratio in per_gpu[gpu.uuid]["over_rtk_counter"].items():
            if ratio is None:
                io.error(f"GPU {gpu.index}: no energy from {source} over the window")
            elif abs(ratio - 1) > DISAGREE:
                findings.append(f"GPU {gpu.index}: {source} is {ratio:.3f}x rtk's counter")
    io.measure("gpus", per_gpu)
    io.measure("findings", findings)
    first = next(iter(per_gpu.values()), {}).get("over_rtk_counter", {})
    io.summary(
        "over rtk's counter: "
        + ", ".join(f"{k} {v:.3f}" if v else f"{k} n/a" for k, v in first.items())
    )
