"""The suite's pytest-xdist groups keep machine-wide resources on one worker.

Sandboxes are named network namespaces on a bridge of their own subnet: two modules
that run at once on different workers must not create one of the same name or
subnet. Each ``create(..., name=..., subnet=...)`` and each ``rtk sandbox up --name
--subnet`` that is not a dry run is found in the test sources, and every name and
subnet must belong to one group only (``tests/conftest.py``'s ``XDIST_GROUPS``). A
sandbox a conftest fixture creates belongs to the groups of the modules that name the
fixture.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from conftest import (
    LIGHT_RESERVE_S,
    MAX_HEAVY_AT_ONCE,
    MODULE_SECONDS,
    REPO,
    longest_groups_first,
    next_light,
    xdist_group,
)


def _constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _text(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def sandboxes(path: Path) -> list[tuple[str, str, str]]:
    """("name", NAME, function) and ("subnet", SUBNET, function) of every sandbox the
    file creates, with the top-level function that creates it."""
    tree = ast.parse(path.read_text())
    constants = _constants(tree)
    used: list[tuple[str, str, str]] = []
    for top in tree.body:
        if isinstance(top, ast.FunctionDef):
            used += [(kind, value, top.name) for kind, value in _created(top, constants)]
    return used


def _created(function: ast.FunctionDef, constants: dict[str, str]) -> list[tuple[str, str]]:
    used: list[tuple[str, str]] = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if called == "create":
            for keyword in node.keywords:
                value = _text(keyword.value, constants)
                if keyword.arg in ("name", "subnet") and value is not None:
                    used.append((keyword.arg, value))
        words = [_text(arg, constants) for arg in node.args]
        if "sandbox" in words and "up" in words and "--dry-run" not in words:
            for flag, kind in (("--name", "name"), ("--subnet", "subnet")):
                if flag in words and words.index(flag) + 1 < len(words):
                    value = words[words.index(flag) + 1]
                    if value is not None:
                        used.append((kind, value))
    return used


def test_the_finder_sees_the_sandboxes_of_a_module(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        'NAME = "sbx"\n'
        "def f():\n"
        '    create(2, name=NAME, subnet="10.77.99")\n'
        '    rtk("sandbox", "up", "--name", "sby", "--subnet", "10.77.98")\n'
        '    rtk("sandbox", "up", "--name", "sbz", "--subnet", "10.77.97", "--dry-run")\n'
    )
    assert sorted(sandboxes(module)) == [
        ("name", "sbx", "f"),
        ("name", "sby", "f"),
        ("subnet", "10.77.98", "f"),
        ("subnet", "10.77.99", "f"),
    ]


def test_no_sandbox_name_or_subnet_is_used_by_two_groups() -> None:
    modules = sorted((REPO / "tests").rglob("test_*.py"))
    groups: dict[tuple[str, str], set[str]] = defaultdict(set)
    users: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted((REPO / "tests").rglob("*.py")):
        for kind, value, function in sandboxes(path):
            if path.name == "conftest.py":
                takers = [m for m in modules if function in m.read_text()]
            else:
                takers = [path]
            groups[(kind, value)].update(xdist_group(m) for m in takers)
            users[(kind, value)].update(str(m.relative_to(REPO)) for m in takers)
    assert ("name", "sb3") in groups and ("subnet", "10.77.7") in groups
    shared = {
        f"{kind} {value}": sorted(users[(kind, value)])
        for (kind, value), g in groups.items()
        if len(g) > 1
    }
    assert not shared, f"used by modules of different xdist groups: {shared}"


def test_the_longest_groups_go_out_first_and_a_group_keeps_its_order() -> None:
    modules = [
        "tests/integration/test_jobs_cluster.py",  # sb3, with test_ssh_cluster
        "tests/integration/test_profile_cluster.py",
        "tests/integration/test_ssh_cluster.py",
        "tests/integration/test_new_cluster.py",  # not timed yet: as long as the longest
        "tests/unit/test_a.py",
        "tests/unit/test_b.py",  # not timed: nothing
    ]
    known = {
        "tests/integration/test_jobs_cluster.py": 40.0,
        "tests/integration/test_profile_cluster.py": 100.0,
        "tests/integration/test_ssh_cluster.py": 70.0,
        "tests/unit/test_a.py": 5.0,
    }
    assert longest_groups_first(modules, known) == [
        "tests/integration/test_jobs_cluster.py",  # sb3: 110 s, its modules in order
        "tests/integration/test_ssh_cluster.py",
        "tests/integration/test_profile_cluster.py",  # 100 s, ahead of the unknown by order
        "tests/integration/test_new_cluster.py",
        "tests/unit/test_a.py",
        "tests/unit/test_b.py",
    ]


def test_the_recorded_seconds_name_modules_that_exist() -> None:
    import json

    recorded = json.loads(MODULE_SECONDS.read_text())
    assert recorded["tests/integration/test_train_cluster.py"] > 60
    missing = [m for m in recorded if not (REPO / m).is_file()]
    assert not missing, f"refresh tests/module_seconds.json (scripts/test_times.py): {missing}"


def test_a_light_group_goes_ahead_only_while_enough_heavy_ones_run() -> None:
    queue = ["train", "torchrun", "tests/unit/test_a.py", "tests/unit/test_b.py"]
    heavy = {"train", "torchrun"}
    assert next_light(queue, heavy, heavy_running=MAX_HEAVY_AT_ONCE - 1) is None
    assert next_light(queue, heavy, heavy_running=MAX_HEAVY_AT_ONCE) == "tests/unit/test_a.py"
    # Nothing light left: the heavy ones go out after all.
    assert next_light(["train", "torchrun"], heavy, heavy_running=MAX_HEAVY_AT_ONCE) is None


def test_light_work_is_kept_back_for_the_end_once_little_is_left() -> None:
    """A heavy group goes out beside two others rather than run alone at the end."""
    heavy = {"preflight"}
    light = {f"tests/unit/test_{i}.py": 60.0 for i in range(10)}
    queue = ["preflight", *light]
    seconds = {"preflight": 200.0, **light}
    full = MAX_HEAVY_AT_ONCE
    assert next_light(queue, heavy, full, seconds) == "tests/unit/test_0.py"  # 600 s left
    few = ["preflight", *list(light)[: int(LIGHT_RESERVE_S // 60)]]
    assert next_light(few, heavy, full, seconds) is None  # the reserve: preflight goes
    # With no heavy group queued, light work goes as ever.
    assert next_light(list(light)[:2], heavy, full, seconds) == "tests/unit/test_0.py"
