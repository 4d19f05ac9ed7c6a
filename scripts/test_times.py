"""Where the tests' time went: worker seconds per folder, from pytest's JUnit file.

    python scripts/test_times.py JUNIT_XML

``scripts/test.sh`` prints it at the end of every run, after the wall time per phase:
the tests of one pass run on several workers at once, so the pass's wall time does not
split by folder, but each test's own time does. Folders are the first two levels under
``tests/`` (``unit/telemetry``, ``integration``), largest first.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

SHOWN = 12  # folders listed; the rest summed in one line


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


def worker_seconds(path: str) -> dict[str, tuple[float, int]]:
    """Folder -> (seconds, tests) over every test case of the JUnit file."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for case in ET.parse(path).getroot().iter("testcase"):
        folder = folder_of(case.get("classname", ""))
        totals[folder][0] += float(case.get("time") or 0.0)
        totals[folder][1] += 1
    return {k: (v[0], int(v[1])) for k, v in totals.items()}


def main(argv: list[str]) -> int:
    """Print the table; 2 on bad usage."""
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    totals = worker_seconds(argv[0])
    if not totals:
        return 0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    all_s = sum(s for s, _ in totals.values())
    print(f"== test time per folder (worker time, {all_s / 60:.1f} min in all)")
    for folder, (seconds, count) in ranked[:SHOWN]:
        print(f"  {folder:<28} {seconds / 60:5.1f} min  {count:5d} tests")
    rest = ranked[SHOWN:]
    if rest:
        seconds = sum(s for _, (s, _) in rest)
        count = sum(c for _, (_, c) in rest)
        print(f"  {f'{len(rest)} more folders':<28} {seconds / 60:5.1f} min  {count:5d} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
