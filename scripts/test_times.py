"""Where the tests' time went: worker seconds per folder, from pytest's JUnit file.

    python scripts/test_times.py JUNIT_XML [--write-seconds tests/module_seconds.json]
                                 [--timeline FILE]

``scripts/test.sh`` prints it at the end of every run, after the wall time per phase:
the tests of one pass run on several workers at once, so the pass's wall time does not
split by folder, but each test's own time does. Folders are the first two levels under
``tests/`` (``unit/telemetry``, ``integration``), largest first. The integration
modules follow one by one (their time includes their clusters' bring-up, which lands in
a module's first test), for they are most of the time.

``--write-seconds FILE`` also writes each test module's worker seconds there, which
``tests/conftest.py`` reads to hand the longest groups of tests out first: refresh it
from a CI run's JUnit file (``RTK_TEST_JUNIT``) when modules come, go or change much.

``--timeline FILE`` (what ``RTK_TEST_TIMELINE`` made tests/conftest.py write: each
test's worker, start and end) also prints each worker's stretch of the pass: when it
ended, and the modules it ran for a minute or more, in order, with their minutes from
the pass's start. A worker that ends long before the others shows the run's tail.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

SHOWN = 12  # folders listed; the rest summed in one line
MODULES_SHOWN = 30  # integration modules listed
LONG_S = 60.0  # a module run a worker's timeline names (the shorter ones are counted)


def folder_of(classname: str) -> str:
    """``tests.unit.telemetry.test_x.TestY`` -> ``unit/telemetry``; integration as one."""
    parts = classname.split(".")
    if parts and parts[0] == "tests":
        parts = parts[1:]
    modules = [p for p in parts if not p.startswith("test_") and p[:1].islower()]
    if not modules:
        return "(top)"
    if modules[0] != "unit":
        return modules[0]
    return "/".join(modules[:2])


def module_of(classname: str) -> str | None:
    """``tests.integration.test_x.TestY`` -> ``test_x``; None outside integration."""
    parts = classname.split(".")
    if parts[:1] == ["tests"]:
        parts = parts[1:]
    if len(parts) < 2 or parts[0] != "integration":
        return None
    return parts[1]


def module_path(classname: str) -> str | None:
    """A test class or module's file, from its JUnit classname; None if no module."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return None


def _sums(path: str, key_of: Callable[[str], str | None]) -> dict[str, tuple[float, int]]:
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for case in ET.parse(path).getroot().iter("testcase"):
        key = key_of(case.get("classname", ""))
        if key is not None:
            totals[key][0] += float(case.get("time") or 0.0)
            totals[key][1] += 1
    return {k: (v[0], int(v[1])) for k, v in totals.items()}


def worker_seconds(path: str) -> dict[str, tuple[float, int]]:
    """Folder -> (seconds, tests) over every test case of the JUnit file."""
    return _sums(path, folder_of)


def module_seconds(path: str) -> dict[str, tuple[float, int]]:
    """Integration module -> (seconds, tests)."""
    return _sums(path, module_of)


def write_seconds(path: str, out: str) -> None:
    """Each module's worker seconds (rounded to a second), as JSON, sorted by path."""
    seconds = {
        k: round(s) for k, (s, _) in sorted(_sums(path, module_path).items()) if round(s) > 0
    }
    with open(out, "w") as f:
        json.dump(seconds, f, indent=1)
        f.write("\n")


def worker_runs(lines: list[str]) -> dict[str, list[tuple[str, float, float]]]:
    """Worker -> the modules it ran, in order: (module, start_s, end_s).

    The consecutive tests of one module are joined. ``lines``: ``WORKER START_S END_S
    NODEID``, as tests/conftest.py writes them; a torn line is skipped.
    """
    tests: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for line in lines:
        parts = line.split(maxsplit=3)
        if len(parts) != 4:
            continue
        try:
            start_s, end_s = float(parts[1]), float(parts[2])
        except ValueError:
            continue
        tests[parts[0]].append((start_s, end_s, parts[3].split("::", 1)[0]))
    runs: dict[str, list[tuple[str, float, float]]] = {}
    for worker, mine in tests.items():
        joined: list[tuple[str, float, float]] = []
        for start_s, end_s, module in sorted(mine):
            if joined and joined[-1][0] == module:
                joined[-1] = (module, joined[-1][1], end_s)
            else:
                joined.append((module, start_s, end_s))
        runs[worker] = joined
    return runs


def timeline_lines(runs: dict[str, list[tuple[str, float, float]]]) -> list[str]:
    """A line per worker: when it ended and its long module runs, in minutes from the start."""
    if not runs:
        return []
    t0 = min(r[0][1] for r in runs.values() if r)
    out = []
    for worker in sorted(runs):
        mine = runs[worker]
        long = [r for r in mine if r[2] - r[1] >= LONG_S]
        named = [f"{Path(m).stem} {(a - t0) / 60:.1f}-{(b - t0) / 60:.1f}" for m, a, b in long]
        short = len(mine) - len(long)
        tail = f" (+{short} shorter)" if short else ""
        end = (mine[-1][2] - t0) / 60 if mine else 0.0
        out.append(f"  {worker:<5} ends {end:5.1f} min: {', '.join(named) or '-'}{tail}")
    return out


def _table(ranked: list[tuple[str, tuple[float, int]]], shown: int, what: str) -> None:
    for name, (seconds, count) in ranked[:shown]:
        print(f"  {name:<28} {seconds / 60:5.1f} min  {count:5d} tests")
    rest = ranked[shown:]
    if rest:
        seconds = sum(s for _, (s, _) in rest)
        count = sum(c for _, (_, c) in rest)
        print(f"  {f'{len(rest)} more {what}':<28} {seconds / 60:5.1f} min  {count:5d} tests")


def main(argv: list[str]) -> int:
    """Print the table; 2 on bad usage or a JUnit file that cannot be read."""
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv and not Path(argv[0]).is_file():
        print(f"test_times: {argv[0]}: no such JUnit file", file=sys.stderr)
        return 2
    timeline: list[str] = []
    if len(argv) >= 3 and argv[-2] == "--timeline":
        try:
            timeline = timeline_lines(worker_runs(Path(argv[-1]).read_text().splitlines()))
        except OSError as e:
            print(f"test_times: {argv[-1]}: {e.strerror}", file=sys.stderr)
        argv = argv[:-2]
    if len(argv) == 3 and argv[1] == "--write-seconds":
        write_seconds(argv[0], argv[2])
        argv = argv[:1]
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    totals = worker_seconds(argv[0])
    if not totals:
        return 0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    all_s = sum(s for s, _ in totals.values())
    print(f"== test time per folder (worker time, {all_s / 60:.1f} min in all)")
    _table(ranked, SHOWN, "folders")
    modules = sorted(module_seconds(argv[0]).items(), key=lambda kv: -kv[1][0])
    if modules:
        print("== integration modules (worker time, bring-ups included)")
        _table(modules, MODULES_SHOWN, "modules")
    if timeline:
        print("== each worker's stretch (modules of a minute or more, minutes from the start)")
        print("\n".join(timeline))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
