"""The measures that keep toolkit/ readable (issue 31): folder and module sizes, and
few untyped records.

- No folder holds more than 15 modules (``__init__.py`` aside).
- No module outside ``toolkit/node/`` (the stdlib node scripts, sent whole) has more
  than 450 lines.
- At most 80 lines with an untyped map outside the node scripts, whichever way it is
  spelt (``dict`` or ``Mapping``, of ``Any`` or ``object``), signatures included:
  records crossing modules are dataclasses, documents that are JSON by contract are
  ``toolkit.json_types.JsonObject``, and every ``to_json`` returns one.
- At most 6 module basenames shared by packages, each for one role (``SHARED_BASENAMES``).
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

TOOLKIT = REPO / "toolkit"
MAX_MODULES_PER_FOLDER = 15
MAX_LINES_PER_MODULE = 450
MAX_UNTYPED_RECORDS = 80
UNTYPED = re.compile(r"\b(dict|Mapping)\[str, (Any|object)\]")
TO_JSON = re.compile(r"def to_json\(self\) -> (.+):$")


def _modules() -> list[Path]:
    return sorted(p for p in TOOLKIT.rglob("*.py") if "__pycache__" not in p.parts)


def _outside_node(path: Path) -> bool:
    return path.relative_to(TOOLKIT).parts[0] != "node"


def untyped_records(paths: list[Path]) -> list[tuple[Path, int]]:
    """The file and line of each line with an untyped map (``UNTYPED``)."""
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if UNTYPED.search(line):
                found.append((path, number))
    return found


def test_no_folder_holds_more_than_15_modules() -> None:
    folders: dict[Path, int] = {}
    for path in _modules():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {
        str(f.relative_to(REPO)): n for f, n in folders.items() if n > MAX_MODULES_PER_FOLDER
    }
    assert len(folders) > 20 and not crowded, crowded


def test_no_module_outside_the_node_scripts_is_longer_than_450_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules()
        if _outside_node(p) and (n := len(p.read_text().splitlines())) > MAX_LINES_PER_MODULE
    }
    assert not long, long


def test_the_counter_counts_what_it_should(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f(x: dict[str, Any]) -> None: ...\n"
        "    def to_json(self) -> dict[str, Any]:\n"
        "    def from_json(cls, data: Mapping[str, object]) -> X:\n"
        "y: dict[str, object] = {}\n"
        "z: list[Mapping[str, Any]] = []\n"
        "w: JsonObject = {}  # a Mapping[str, int] is typed\n"
        "v: dict[str, int] = {}\n"
    )
    assert untyped_records([module]) == [(module, n) for n in range(1, 6)]


def test_every_to_json_returns_the_one_json_type() -> None:
    others = [
        f"{p.relative_to(REPO)}:{n}: {m.group(1)}"
        for p in _modules()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if (m := TO_JSON.search(line)) and m.group(1) != "JsonObject"
    ]
    assert others == []


def test_at_most_80_untyped_maps_outside_the_node_scripts() -> None:
    found = untyped_records([p for p in _modules() if _outside_node(p)])
    assert len(found) <= MAX_UNTYPED_RECORDS, [f"{p.relative_to(REPO)}:{n}" for p, n in found]


# Module basenames that more than one package uses, each for one role: a reader who
# knows one knows what the others are. Any other basename is one package's alone.
SHARED_BASENAMES = {
    "base.py": "the interface a family of implementations shares (sensors, transports, workloads)",
    "records.py": "the one owner of a file format's records (rundir, stall.json, power.jsonl)",
    "settings.py": "the options a user chose for a run (the stall watchdog, the power policy)",
    "job.py": "a Ray job's entrypoint on the head (the trainer, the preflight jobs)",
    "job_options.py": "what a preflight job is asked",
    "job_result.py": "what a preflight job answers",
}


def repeated_basenames(paths: list[Path]) -> dict[str, list[str]]:
    """Basename -> the modules that share it (``__init__.py`` aside), for those shared."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    return {name: found for name, found in sorted(by_name.items()) if len(found) > 1}


def test_at_most_6_basenames_repeat_each_for_one_role() -> None:
    repeated = repeated_basenames(_modules())
    assert len(SHARED_BASENAMES) <= 6
    unlisted = {name: found for name, found in repeated.items() if name not in SHARED_BASENAMES}
    assert not unlisted, (
        f"{unlisted}: a module named like another package's for another role; name it for "
        "what it does (or, for the same role, list it in SHARED_BASENAMES)"
    )
    planted = [TOOLKIT / "a" / "x.py", TOOLKIT / "b" / "x.py", TOOLKIT / "b" / "__init__.py"]
    assert repeated_basenames(planted) == {"x.py": ["toolkit/a/x.py", "toolkit/b/x.py"]}
