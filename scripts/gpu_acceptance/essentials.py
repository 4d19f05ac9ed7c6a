"""``--essentials``: the plan a one-command run prints first, and what broke, said early.

A GPU machine is lent to this project rarely, for about a quarter of an hour with at
most 10 minutes a command. ``plan_lines`` prints the run before it starts: each step in
order with its own budget and the exact command lines (the same under ``--dry-run``,
so the rehearsal on a CPU machine shows what the GPU will run). ``broken_lines`` says,
right after the install and right after ``ray-up``, what stops the Ray stages and how
to mend it, so that the head of the output names the cause and a second, short call on
the same machine can fix it and go on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_acceptance.cli import REPO, Options
from gpu_acceptance.context import StageContext
from gpu_acceptance.record import StageResult
from gpu_acceptance.stages import SETUP, by_name
from gpu_acceptance.stages.with_ray.common import shown

BROKEN = "BROKEN:"


def setup_line(options: Options) -> str:
    """What the install step does."""
    if not options.install:
        return "install nothing (--no-install): rtk from PYTHONPATH"
    wheelhouse = options.wheelhouse
    if wheelhouse is not None and wheelhouse.resolve().is_relative_to(REPO):
        wheelhouse = wheelhouse.resolve().relative_to(REPO)
    source = (
        f"from {wheelhouse}" + (" (offline)" if options.offline else "")
        if options.wheelhouse
        else "from the package registry (no wheelhouse: bring one, see docs/gpu.md)"
    )
    return (
        f"install what is missing {source}: Ray from its archive and its dependencies, "
        "rtk (pip install --no-deps -e .), Zeus, fabric, pydantic; never torch"
        + ("" if options.sdists else "; DeepSpeed not built")
    )


def plan_lines(options: Options, ctx: StageContext, commands: bool = True) -> list[str]:
    """The essentials' steps in order: budget, what each does, its command lines.

    Without ``commands`` (a GPU run, whose head must stay short enough to show what
    broke), one line a step: its name and budget.
    """
    total_s = sum(budget_s for _, budget_s in options.budgets)
    lines = [
        f"essentials: {len(options.budgets)} steps, {total_s:.0f} s planned of the "
        f"{options.budget_s:.0f} s budget; a step that ends early leaves its time to the "
        "next, one that no longer fits is skipped with the command that runs it alone"
    ]
    if not commands:
        steps = ", ".join(f"{name} {budget_s:.0f} s" for name, budget_s in options.budgets)
        return [*lines, f"  {steps}"]
    for i, (name, budget_s) in enumerate(options.budgets, 1):
        if name == SETUP:
            lines.append(f"  {i} {name:<13} {budget_s:4.0f} s  {setup_line(options)}")
            continue
        module = by_name(name).load()
        lines.append(f"  {i} {name:<13} {budget_s:4.0f} s  {module.describe(ctx)}")
        lines += [f"      $ {shown(ctx, argv)}" for argv in module.commands(ctx)]
    return lines


def _import_error(environment: Mapping[str, Any], module: str) -> str:
    """Why ``module`` did not import, as the import probe said (or why it said nothing)."""
    imports: Mapping[str, Any] = environment.get("imports") or {}
    found = imports.get(module)
    if isinstance(found, Mapping):
        return str(found.get("error") or "unknown error")
    return str(imports.get("error") or "not probed")


def broken_lines(
    environment: Mapping[str, Any], ctx: StageContext, up: StageResult | None = None
) -> list[str]:
    """What stops the Ray stages, with the fix: after the install, or after ray-up.

    Empty when nothing does. ``environment`` is the record's (its ``install`` and
    ``imports``); ``up`` is ray-up's result once it ran.
    """
    install = environment.get("install") or {}
    failed = install.get("failed") or {}
    lines: list[str] = []
    if up is None:
        if not ctx.has("ray"):
            cause = _import_error(environment, "ray")
            lines.append(f"{BROKEN} Ray does not import after the install: {cause[:300]}")
            for name, why in list(failed.items())[:4]:
                lines.append(f"{BROKEN}   install of {name} failed: {str(why)[-240:]}")
            lines.append(
                "  FIX: fill the wheelhouse with Ray where the registry answers "
                "(bash scripts/gpu-wheelhouse.sh .whl --with-ray --ray-version V), carry it, "
                "and run again; the JSON's environment.install.steps has each pip call"
            )
        if not ctx.has("torch"):
            lines.append(f"{BROKEN} torch does not import: {_import_error(environment, 'torch')}")
            lines.append("  FIX: run with --python PY, the Python that holds the CUDA torch")
        rtk = str(install.get("rtk") or "")
        if "failed" in rtk:
            lines.append(f"{BROKEN} rtk: {rtk}; the stages use PYTHONPATH instead")
        return lines
    if up.status == "ok":
        return lines
    ran = up.measurements.get("rtk_up") or {}
    lines.append(f"{BROKEN} ray-up {up.status}: {up.reason}")
    for error in up.errors[:3]:
        lines.append(f"{BROKEN}   {error[:400]}")
    tail = str(ran.get("tail") or "").strip().splitlines()[-6:]
    lines += [f"  | {line[:200]}" for line in tail]
    lines.append(
        "  FIX: run rtk up --local --verbose alone (bash scripts/gpu-acceptance.sh "
        "--stages ray-up --quick), read the Ray logs under the session directory it names"
    )
    return lines
