"""The command line of ``scripts/gpu-acceptance.sh`` (which passes it on unchanged).

Exit status: 0 when the run completed (what failed is in the JSON), 2 on bad usage,
130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from gpu_acceptance.context import STRATEGIES
from gpu_acceptance.stages import (
    ESSENTIAL_STRATEGIES,
    ESSENTIALS,
    ESSENTIALS_TOTAL_S,
    SETUP,
    STAGE_NAMES,
    with_cluster,
)

DEFAULT_OUT = "gpu-acceptance-out"
DEFAULT_BUDGET_S = 540.0
REPO = Path(__file__).resolve().parents[2]
DEFAULT_WHEELHOUSE = REPO / ".whl"  # where --essentials looks when --wheelhouse is not given


@dataclass(frozen=True)
class Options:
    """The options, checked.

    Attributes:
        out: Where the JSON, the markdown and the log go.
        stages: The stages to run, in the order they run: the fixed order, or the
            essentials' order (a Ray stage brings ray-up and ray-down with it).
        quick: Shorter windows and fewer steps.
        dry_run: List the stages and what each would do; run and install nothing.
        wheelhouse: A directory of wheels and sdists to install from (offline).
        offline: Never ask the package registry.
        install: Install what is missing (``--no-install`` turns it off).
        budget_s: The whole run's time; stages that no longer fit are skipped.
        sensor_s: Seconds of each sensor window.
        energy_s: Seconds of the energy window.
        train_steps: Steps per training run.
        strategies: The strategies stage 4 trains with.
        work: Scratch directory (default: a new temporary one, removed at the end).
        keep_work: Keep the scratch directory.
        argv: The command line as given.
        essentials: The one-command run of ``ESSENTIALS``: their order and budgets.
        budgets: Stage name (and ``setup``) -> its own seconds, in run order; empty
            outside ``--essentials`` (then each stage has its ``timeout_s``).
        sdists: Build source distributions from the wheelhouse (DeepSpeed); not
            with ``--essentials``, which trains no DeepSpeed.
    """

    out: Path
    stages: tuple[str, ...]
    quick: bool
    dry_run: bool
    wheelhouse: Path | None
    offline: bool
    install: bool
    budget_s: float
    sensor_s: float
    energy_s: float
    train_steps: int
    strategies: tuple[str, ...]
    work: Path | None
    keep_work: bool
    argv: tuple[str, ...]
    essentials: bool = False
    budgets: tuple[tuple[str, float], ...] = ()
    sdists: bool = True

    def budget_of(self, name: str) -> float | None:
        """The stage's own budget under ``--essentials`` (None outside it)."""
        return dict(self.budgets).get(name)

    def planned_end_s(self, name: str) -> float | None:
        """Seconds from the run's start by which ``name`` is planned to have ended."""
        total = 0.0
        for stage, budget_s in self.budgets:
            total += budget_s
            if stage == name:
                return total
        return None


def _names(text: str, valid: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'}; choose from {', '.join(valid)}"
        )
    return tuple(n for n in valid if n in names)  # the fixed order


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from e
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(
        prog="bash scripts/gpu-acceptance.sh",
        description="Run rtk's GPU acceptance stages; write gpu-acceptance.json and .md.",
        epilog="Stages: " + ", ".join(STAGE_NAMES) + ". The script itself also takes "
        "--python PY (or RTK_PYTHON) and --venv DIR.",
    )
    p.add_argument(
        "--out", type=Path, help="output directory (default: $OUT, else ./gpu-acceptance-out)"
    )
    p.add_argument(
        "--stages",
        type=lambda t: _names(t, STAGE_NAMES, "stage"),
        default=None,
        help="comma-separated stages to run (default: all; a ray-* stage brings ray-up "
        "and ray-down with it)",
    )
    p.add_argument("--quick", action="store_true", help="short windows, few steps")
    p.add_argument(
        "--essentials",
        action="store_true",
        help="the one-command run for a GPU lent for one 10-minute call: install from "
        "the wheelhouse (default .whl, offline), then "
        + ", ".join(n for n, _ in ESSENTIALS if n != SETUP)
        + f", each with its own budget, {ESSENTIALS_TOTAL_S:.0f} s in all (implies --quick)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the stages; run nothing")
    p.add_argument("--wheelhouse", type=Path, help="install missing packages from this directory")
    p.add_argument("--offline", action="store_true", help="never ask the package registry")
    p.add_argument("--no-install", action="store_true", help="install nothing")
    p.add_argument(
        "--budget-s",
        type=_positive,
        default=None,
        help=f"whole-run time limit (default {DEFAULT_BUDGET_S:.0f} s)",
    )
    p.add_argument("--sensor-seconds", type=_positive, help="each sensor window (20, quick 5)")
    p.add_argument("--energy-seconds", type=_positive, help="the energy window (20, quick 8)")
    p.add_argument("--train-steps", type=int, help="steps per training run (40, quick 12)")
    p.add_argument(
        "--strategies",
        type=lambda t: _names(t, tuple(STRATEGIES), "strategy"),
        default=None,
        help="strategies for the train stage (default: " + ",".join(STRATEGIES) + ")",
    )
    p.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    p.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    return p


def parse(argv: list[str]) -> Options:
    """The checked options (argparse exits 2 on bad usage)."""
    p = parser()
    args = p.parse_args(argv)
    if args.train_steps is not None and args.train_steps < 1:
        p.error("--train-steps must be at least 1")
    essentials = bool(args.essentials)
    wheelhouse, offline = args.wheelhouse, bool(args.offline)
    stages = with_cluster(args.stages or STAGE_NAMES)
    strategies = args.strategies or tuple(STRATEGIES)
    budgets: tuple[tuple[str, float], ...] = ()
    if essentials:
        if args.stages is not None:
            p.error("--essentials runs its own stages; leave out --stages")
        if wheelhouse is None and DEFAULT_WHEELHOUSE.is_dir():
            wheelhouse = DEFAULT_WHEELHOUSE
        offline = offline or wheelhouse is not None
        budgets = ESSENTIALS
        stages = tuple(n for n, _ in ESSENTIALS if n != SETUP)
        strategies = args.strategies or ESSENTIAL_STRATEGIES
    if wheelhouse is not None and not wheelhouse.is_dir():
        p.error(f"--wheelhouse {wheelhouse}: not a directory")
    out = args.out or Path(os.environ.get("OUT") or DEFAULT_OUT)
    quick = bool(args.quick) or essentials
    budget_s = args.budget_s or (ESSENTIALS_TOTAL_S if essentials else DEFAULT_BUDGET_S)
    return Options(
        out=out,
        stages=stages,
        quick=quick,
        dry_run=bool(args.dry_run),
        wheelhouse=wheelhouse,
        offline=offline,
        install=not args.no_install,
        budget_s=budget_s,
        sensor_s=args.sensor_seconds or (5.0 if quick else 20.0),
        energy_s=args.energy_seconds or (8.0 if quick else 20.0),
        train_steps=args.train_steps or (12 if quick else 40),
        strategies=strategies,
        work=args.work,
        keep_work=bool(args.keep_work),
        argv=tuple(argv),
        essentials=essentials,
        budgets=budgets,
        sdists=not essentials,
    )


def main(argv: list[str]) -> int:
    """Parse, run, and return the exit status."""
    from gpu_acceptance.runner import run

    return run(parse(argv))
