"""The run: probe, install, each stage in its own process with a time limit, write.

The JSON and the markdown are rewritten after every stage, so a run cut short (the
machine taken back, the command's own limit) still leaves everything measured so far.
GPU settings are put back after every stage whenever a restore file is left over.
The Ray stages run only where Ray imports, the later ones only once ``ray-up`` brought
a cluster up (``ray_skip_reason``); their time is counted less ``ray-down``'s, which
runs in a ``finally`` whenever ``ray-up`` ran, whatever the budget says.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.util
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from gpu_acceptance import gpuctl, install, machine, procs
from gpu_acceptance.cli import Options
from gpu_acceptance.context import StageContext
from gpu_acceptance.essentials import broken_lines, plan_lines
from gpu_acceptance.markdown import render
from gpu_acceptance.record import (
    JSON_FILE,
    LOG_FILE,
    MARKDOWN_FILE,
    RunRecord,
    StageResult,
    write_json_atomic,
    write_text_atomic,
)
from gpu_acceptance.stages import RAY_DOWN, RAY_UP, STAGES, StageSpec, by_name
from gpu_acceptance.stages.with_ray.common import NO_RAY, shown

REPO = Path(__file__).resolve().parents[2]
LOG_STAGE_CHARS = 60_000  # of each stage's output kept in the log: its head and its tail
IMPORT_PROBE_S = 240.0


class RunInterruptedError(Exception):
    """SIGINT or SIGTERM arrived."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise RunInterruptedError(signal.Signals(signum).name)


class Run:
    """One acceptance run: the record, the files, the log."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.began = time.monotonic()
        self.out = options.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = (self.out / LOG_FILE).open("w", encoding="utf-8")
        self.work = options.work or Path(tempfile.mkdtemp(prefix="rtk-gpu-acceptance-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.python = sys.executable
        self.record: RunRecord | None = None

    def say(self, line: str) -> None:
        """Print a progress line and keep it in the log."""
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def left_s(self) -> float:
        """Seconds left of the budget."""
        return self.options.budget_s - (time.monotonic() - self.began)

    def write(self) -> None:
        """Rewrite the JSON and the markdown from the record."""
        assert self.record is not None
        self.record.duration_s = time.monotonic() - self.began
        write_json_atomic(self.out / JSON_FILE, self.record.to_json())
        write_text_atomic(self.out / MARKDOWN_FILE, render(self.record))

    def close(self) -> None:
        """Close the log; remove the scratch directory unless asked to keep it."""
        self.log.close()
        if not self.options.keep_work and self.options.work is None:
            shutil.rmtree(self.work, ignore_errors=True)


def run(options: Options) -> int:
    """Run everything ``options`` asks; 0 when the run completed, 130 when interrupted."""
    current = Run(options)
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run(current)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        current.close()


def run_order(options: Options) -> tuple[StageSpec, ...]:
    """The stages in the order they run: those selected (in their order), then the rest."""
    chosen = tuple(by_name(n) for n in options.stages)
    return chosen + tuple(s for s in STAGES if s.name not in options.stages)


def _run(r: Run) -> int:
    o = r.options
    order = run_order(o)
    probe = machine.probe_gpus()
    mode = "dry-run" if o.dry_run else ("gpu" if probe.found else "cpu")
    versions = machine.versions()
    environment: dict[str, Any] = {
        "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name} for g in probe.gpus],
        "gpu_probe": {"via": probe.via, "reason": probe.reason, "notes": probe.notes},
        "versions": versions,
        "python": r.python,
        "selected_stages": list(o.stages),
        "budget_s": o.budget_s,
        "quick": o.quick,
        "essentials": o.essentials,
    }
    if o.budgets:
        environment["stage_budgets_s"] = dict(o.budgets)
    r.record = RunRecord(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        mode=mode,
        host=socket.gethostname(),
        gpu_model=probe.model,
        gpu_count=len(probe.gpus),
        driver_version=probe.driver_version,
        cuda_version=probe.cuda_version,
        torch_version=versions.get("torch"),
        python_version=platform.python_version(),
        command=["bash scripts/gpu-acceptance.sh", *o.argv],
        environment=environment,
        stages=[StageResult(s.name, s.title) for s in order],
    )
    ctx = StageContext(
        repo=str(REPO),
        work=str(r.work),
        python=r.python,
        quick=o.quick,
        sensor_s=o.sensor_s,
        energy_s=o.energy_s,
        train_steps=o.train_steps,
        strategies=o.strategies,
        gpus=probe.gpus,
        dry_run=o.dry_run,
        importable=machine.findable() if mode != "gpu" else {},
        essentials=o.essentials,
    )
    r.say(f"rtk GPU acceptance: {mode} mode, {len(probe.gpus)} GPU(s), output in {r.out}")
    if o.essentials:
        for line in plan_lines(o, ctx, commands=mode != "gpu"):
            r.say(line)
    if mode != "gpu":
        environment["importable"] = ctx.importable
        why = "dry run" if o.dry_run else f"no GPU ({probe.reason})"
        for i, (spec, result) in enumerate(zip(order, r.record.stages, strict=True), 1):
            result.status = "skipped"
            if spec.name not in o.stages:
                result.reason = "not selected (--stages)"
            elif o.dry_run:
                result.reason = f"dry run: would {spec.load().describe(ctx)}"
            else:
                result.reason = why
            if hasattr(spec.load(), "commands"):
                commands = [shown(ctx, argv) for argv in spec.load().commands(ctx)]
                result.measurements["commands"] = commands
            if not o.essentials:
                r.say(f"{i} {spec.name:<13} skipped: {result.reason}")
        r.write()
        return 0

    try:
        ctx = _prepare(r, ctx)
        r.write()
        for line in broken_lines(r.record.environment, ctx):
            r.say(line)
        _stages(r, ctx, order)
    except RunInterruptedError as e:
        r.say(f"interrupted ({e}): putting GPU settings back and writing what was measured")
        for result in r.record.stages:
            if result.status == "skipped" and not result.reason:
                result.reason = f"not run: interrupted ({e})"
        _restore(r, ctx, r.record.stages[-1])
        r.write()
        return 130
    r.write()
    return 0


def _prepare(r: Run, ctx: StageContext) -> StageContext:
    """Install what is missing, then find out what imports; the stages' context."""
    assert r.record is not None
    o = r.options
    env = ctx.env()
    log = install.InstallLog(python=r.python)
    if o.install:
        r.say("setup: installing what is missing (the machine's torch is kept)")
        installer = install.Installer(r.python, env, log, say=lambda line: r.say(f"setup: {line}"))
        try:
            if o.wheelhouse is not None:
                installer.from_wheelhouse(o.wheelhouse, sdists=o.sdists)
            importlib.invalidate_caches()
            missing = [m for m in install.REGISTRY_WANTED if importlib.util.find_spec(m) is None]
            if missing and not o.offline:
                if installer.registry_answers():
                    installer.from_registry(missing)
                else:
                    log.notes.append(f"package registry unreachable; still missing: {missing}")
            elif missing:
                log.notes.append(f"--offline; still missing: {missing}")
            importlib.invalidate_caches()
            # An editable build with hatchling needs the editables package too.
            can_build = all(importlib.util.find_spec(m) for m in ("hatchling", "editables"))
            installer.rtk(REPO, can_build)
        finally:
            installer.close()
    else:
        log.notes.append("--no-install: nothing installed")
        log.rtk = "on PYTHONPATH"
    r.record.environment["install"] = log.to_json()
    importlib.invalidate_caches()
    imports = machine.probe_imports(r.python, env, IMPORT_PROBE_S)
    r.record.environment["imports"] = imports
    importable = {k: bool(v.get("ok")) for k, v in imports.items() if isinstance(v, dict)}
    if "error" in imports:  # the probe itself failed: fall back to what is on the path
        r.say(f"setup: the import probe failed ({imports['error']}); using what is on the path")
        importable = machine.findable()
    r.record.environment["importable"] = importable
    torch = imports.get("torch") if isinstance(imports.get("torch"), dict) else {}
    if torch and torch.get("version"):
        r.record.torch_version = f"{torch['version']} (CUDA {torch.get('cuda_build')})"
    environment_tools = {
        "nvcc": shutil.which("nvcc"),
        "gcc": shutil.which("gcc") or shutil.which("cc"),
        "dcgmi": shutil.which("dcgmi"),
        "ninja": shutil.which("ninja"),
        "root": _is_root(),
    }
    r.record.environment["tools"] = environment_tools
    r.say(
        "setup: importable: "
        + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in sorted(importable.items()))
    )
    return dataclasses.replace(ctx, importable=importable)


def _is_root() -> bool:
    import os

    return os.geteuid() == 0


def ray_skip_reason(spec: StageSpec, ray_importable: bool, up: StageResult | None) -> str | None:
    """Why a Ray stage cannot run now (None: it can; never a reason for the others).

    ``up`` is ray-up's result once it ran (None before, or when it did not start):
    ray-down runs whenever ray-up did; the other Ray stages need the cluster it
    brought up (``cluster_up``), even when one of its checks failed.
    """
    if not spec.ray:
        return None
    if not ray_importable:
        return NO_RAY
    if spec.name == RAY_UP:
        return None
    if up is None:
        return "ray-up did not run: no Ray cluster"
    if spec.name == RAY_DOWN or up.measurements.get("cluster_up"):
        return None
    return f"ray-up brought no cluster up ({up.reason or up.status})"


def _stages(r: Run, ctx: StageContext, order: tuple[StageSpec, ...]) -> None:
    """Every stage in ``order``; ray-down last, in a ``finally``, once ray-up ran."""
    assert r.record is not None
    record, o = r.record, r.options
    up: StageResult | None = None
    down = order.index(by_name(RAY_DOWN))
    reserve_s = o.budget_of(RAY_DOWN) or (
        by_name(RAY_DOWN).quick_timeout_s if o.quick else by_name(RAY_DOWN).timeout_s
    )

    def one(i: int, always: bool = False) -> StageResult:
        spec, result = order[i], record.stages[i]
        why = ray_skip_reason(spec, ctx.ray, up)
        if spec.name not in o.stages:
            result.status, result.reason = "skipped", "not selected (--stages)"
        elif why is not None:
            result.status, result.reason = "skipped", why
        else:
            keep_s = reserve_s if spec.ray and RAY_DOWN in o.stages and not always else 0.0
            result = _stage(r, ctx, spec, result, keep_s, always)
        record.stages[i] = result
        if spec.name in o.stages or not o.essentials:
            r.say(
                f"{i + 1} {spec.name:<13} {result.status}: {result.reason} "
                f"({result.duration_s:.0f} s)"
            )
        r.write()
        return result

    try:
        for i, spec in enumerate(order):
            if i == down:
                continue
            done = one(i)
            if spec.name == RAY_UP and done.status != "skipped":
                up = done
                for line in broken_lines(record.environment, ctx, up):
                    r.say(line)
    finally:
        one(down, always=up is not None)


def _stage(
    r: Run,
    ctx: StageContext,
    spec: StageSpec,
    result: StageResult,
    keep_s: float = 0.0,
    always: bool = False,
) -> StageResult:
    """Run one stage within what is left of the budget less ``keep_s``.

    With ``always`` (ray-down), the stage gets its own limit whatever is left.
    """
    o = r.options
    left = r.left_s() - keep_s
    if left < spec.min_s and not always:
        result.status = "skipped"
        result.reason = (
            f"out of time: {max(left, 0):.0f} s left of the {o.budget_s:.0f} s budget; "
            f"run it alone with --stages {spec.name}"
        )
        return result
    timeout_s = spec.quick_timeout_s if o.quick else spec.timeout_s
    budget_s = o.budget_of(spec.name)
    if budget_s is not None and always:
        timeout_s = budget_s
    elif budget_s is not None:
        # Its own budget, or more when the run is ahead of its plan (never past the run's).
        planned_end_s = o.planned_end_s(spec.name) or 0.0
        ahead_s = planned_end_s - (time.monotonic() - r.began)
        timeout_s = max(budget_s, ahead_s)
    if not always:
        timeout_s = min(timeout_s, left)
    r.say(f"-- {spec.name}: {spec.title} (at most {timeout_s:.0f} s)")
    done = _child(r, dataclasses.replace(ctx, stage_timeout_s=timeout_s), spec, timeout_s)
    _restore(r, ctx, done)
    return done


def _child(r: Run, ctx: StageContext, spec: StageSpec, timeout_s: float) -> StageResult:
    """Run the stage in its own process group; kill the group at the time limit."""
    context_path = r.work / "context.json"
    ctx.dump(context_path)
    result_path = r.work / f"stage-{spec.name}.json"
    result_path.unlink(missing_ok=True)
    log_path = r.work / f"stage-{spec.name}.log"
    began = time.monotonic()
    argv = [r.python, "-m", "gpu_acceptance.stage", spec.name, str(context_path), str(result_path)]
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=ctx.env(),
            cwd=ctx.repo,
            start_new_session=True,
        )
        timed_out = False
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            procs.kill_group(proc)
            rc, timed_out = proc.returncode, True
        except RunInterruptedError:
            procs.kill_group(proc)
            raise
        finally:
            if proc.poll() is None:
                procs.kill_group(proc)
    output = log_path.read_text(encoding="utf-8", errors="replace")
    r.log.write(f"\n===== stage {spec.name} (rc {rc}) =====\n{_trim(output)}\n")
    r.log.flush()
    try:
        result = StageResult.from_json(_read_json(result_path))
    except (OSError, ValueError, KeyError):
        result = StageResult(spec.name, spec.title, status="failed")
    if timed_out:
        result.status = "failed"
        result.errors.append(
            f"timed out after {timeout_s:.0f} s; what it measured until then is kept"
        )
        result.reason = f"timed out after {timeout_s:.0f} s"
    elif rc != 0:
        result.status = "failed"
        result.errors.append(f"the stage process exited {rc}: {procs.tail(output.strip(), 600)}")
        result.reason = f"stage process exited {rc}"
    result.duration_s = time.monotonic() - began
    return result


def _trim(text: str) -> str:
    if len(text) <= LOG_STAGE_CHARS:
        return text
    head = LOG_STAGE_CHARS // 5
    cut = len(text) - LOG_STAGE_CHARS
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-(LOG_STAGE_CHARS - head) :]}"


def _read_json(path: Path) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _restore(r: Run, ctx: StageContext, result: StageResult) -> None:
    """Put back GPU settings a stage left behind (its restore file); note it in ``result``."""
    try:
        answer = gpuctl.restore_if_pending(r.python, Path(ctx.repo), ctx.restore_file)
    except Exception as e:  # noqa: BLE001 - must not stop the run; recorded
        answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    if answer is None:
        return
    result.measurements["restored_after_stage"] = answer
    if not answer.get("ok"):
        result.status = "failed"
        result.errors.append(
            f"GPU settings left behind could not be put back: {answer.get('error')}"
        )
    r.say(f"   GPU settings left behind by {result.name}: restored={bool(answer.get('ok'))}")
