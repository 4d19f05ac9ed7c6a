"""Stage 2: the NVML sensor at 10 Hz and 50 Hz, idle and under a matmul load.

Three samplers (``python -m toolkit.telemetry.sampler``, as rtk runs them) sample at
once, each in its own process so each one's CPU time is its own: full readings at
10 Hz, at 10 Hz with instant power at 50 Hz (rtk's fastest), and full readings at
50 Hz. Then, in this process, the cost of one reading per GPU in NVML calls and
microseconds, and the same values read one call each against one batched
``nvmlDeviceGetFieldValues`` call.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gpu_acceptance import load, procs
from gpu_acceptance.context import StageContext
from gpu_acceptance.samples import achieved, read_samples

# name -> (rate_hz, power_rate_hz or 0)
CONFIGS = {"10hz": (10.0, 0.0), "10hz+power50hz": (10.0, 50.0), "50hz": (50.0, 0.0)}


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    return (
        f"sample NVML at {', '.join(CONFIGS)} for {ctx.sensor_s:g} s idle and {ctx.sensor_s:g} s"
        " under a matmul load (rate, CPU share, late ticks), then time one reading per GPU"
        " (NVML calls, us) and batched nvmlDeviceGetFieldValues reads"
    )


def window(ctx: StageContext, name: str, seconds: float) -> dict[str, Any]:
    """Run the three samplers together for ``seconds``; what each achieved and cost."""
    samplers: dict[str, procs.Background] = {}
    paths = {}
    try:
        for key, (rate_hz, power_hz) in CONFIGS.items():
            paths[key] = ctx.work_dir / f"sensor-{name}-{key}.arrows"
            paths[key].unlink(missing_ok=True)
            argv = [ctx.python, "-m", "toolkit.telemetry.sampler", str(paths[key])]
            argv += [
                "--sensors",
                "nvml",
                "--rate-hz",
                f"{rate_hz:g}",
                "--power-rate-hz",
                f"{power_hz:g}",
            ]
            errors = ctx.work_dir / f"sensor-{name}-{key}.err"
            samplers[key] = procs.Background(argv, env=ctx.env(), stderr_path=errors)
        began: dict[str, tuple[float, float]] = {}
        for key, sampler in samplers.items():
            if sampler.wait_for("{", 60) is None:
                sampler.stop()
                why = (ctx.work_dir / f"sensor-{name}-{key}.err").read_text(errors="replace")
                raise RuntimeError(f"sampler {key} did not start: {procs.last_line(why)}")
            began[key] = (time.monotonic(), procs.cpu_seconds(sampler.pid))
        time.sleep(seconds)
        ended = {key: (time.monotonic(), procs.cpu_seconds(s.pid)) for key, s in samplers.items()}
    finally:
        stats = {key: _stats(s.stop()) for key, s in samplers.items()}
    result = {}
    for key in samplers:
        wall_s = ended[key][0] - began[key][0]
        rates = achieved(read_samples(paths[key]))
        result[key] = {
            "power_readings_per_s": rates["power_readings_per_s"],
            "full_readings_per_s": rates["full_readings_per_s"],
            "cpu_pct_of_core": (ended[key][1] - began[key][1]) / wall_s * 100,
            "sampler": stats[key],
            "per_gpu": rates["per_gpu"],
        }
    return result


def _stats(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            data: dict[str, Any] = json.loads(line)
            return {
                k: data.get(k) for k in ("samples", "ticks", "late_ticks", "errors", "last_error")
            }
    return {"error": "no statistics printed"}


def run(ctx: StageContext, io: Any) -> None:
    """Measure idle, under load, then the cost per reading."""
    if not ctx.has("pynvml"):
        raise io.skip("pynvml (nvidia-ml-py) does not import")
    seconds = ctx.sensor_s
    findings = []
    io.measure("idle", window(ctx, "idle", seconds))
    import pynvml

    from gpu_acceptance.nvmlcost import batched_cost, sensor_cost

    reads = 50 if ctx.quick else 200
    if ctx.has("torch"):
        matmul = load.start(ctx.python, ctx.env(), seconds + 60)
        try:
            io.measure("load", window(ctx, "load", seconds))
            io.measure("cost_per_reading_under_load", sensor_cost(pynvml, reads))
        finally:
            io.measure("load_workload", load.finish(matmul))
    else:
        io.error("torch does not import: no load window")
    cost = sensor_cost(pynvml, reads)
    io.measure("cost_per_reading", cost)
    batch = batched_cost(pynvml, reads)
    io.measure("batched_field_values", batch)
    for phase in ("idle", "load"):
        for key, figures in io.result.measurements.get(phase, {}).items():
            wanted = max(CONFIGS[key])
            got = figures.get("power_readings_per_s") or 0.0
            if got < 0.9 * wanted:
                findings.append(f"{phase} {key}: {got:.1f} power readings/s of {wanted:g} asked")
            if (figures.get("sampler") or {}).get("errors"):
                io.error(f"{phase} {key}: sampler errors: {figures['sampler']}")
    io.measure("findings", findings)
    load_10 = io.result.measurements.get("load", {}).get("10hz+power50hz", {})
    io.summary(
        f"read() {cost['read']['us_per_read_per_gpu']:.0f} us/GPU "
        f"({cost['read']['nvml_calls_per_read_per_gpu']:.0f} NVML calls); "
        f"10+50 Hz under load: {load_10.get('power_readings_per_s') or 0:.1f}/s, "
        f"{load_10.get('cpu_pct_of_core') or 0:.2f}% of a core; "
        f"batched/one-each {batch['batched_over_one_each']:.2f}"
    )
