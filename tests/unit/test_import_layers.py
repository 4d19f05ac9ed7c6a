"""The import rules of ``toolkit/``, read from the source (ast; nothing is imported).

Packages, from the ground up, as ``toolkit/packages.txt`` lists them (``ORDER``): a
module may import its own package and those listed before it, never one listed after,
and no two packages may import each other however indirectly (a cycle is named as
such, whatever the file says). Where code runs decides what it may import
(``RUNS_ON``):

- ``host``: the ``rtk`` process on the user's machine (everything not listed below);
- ``node script``: a stdlib file of ``toolkit/node/`` whose text is fed to ``python -``
  on a node (``toolkit.nodeinfo.script.NodeScript``): only the standard library (and
  Ray inside a function, from the node's own Python), and ``toolkit.node.common``,
  which is sent in front of it; ``toolkit/node/`` holds nothing else;
- ``job driver``: a ``python -m`` entrypoint that runs on the head inside a Ray job, or
  the driver side such entrypoints import (``telemetry.session``);
- ``ray worker``: code Ray runs in actors, tasks or Ray Train workers.

Job drivers and Ray workers get rtk as ``py_modules`` on the nodes, not its host
dependencies: nothing they import, however indirectly, may reach the CLI, the
transports (fabric, paramiko) or click. Every module with a ``__main__`` block must
say where it runs, so a new entrypoint cannot slip past these rules.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pytest
from conftest import REPO

PACKAGE = "toolkit"

ORDER_FILE = REPO / PACKAGE / "packages.txt"


def read_order(text: str) -> list[str]:
    """The package names of an order file, in order (``""`` is the package itself)."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split()[0]
        names.append("" if name == '""' else name)
    return names


ORDER: list[str] = read_order(ORDER_FILE.read_text(encoding="utf-8"))

HOST, NODE_SCRIPT, JOB_DRIVER, RAY_WORKER = "host", "node script", "job driver", "ray worker"

RUNS_ON: dict[str, str] = {
    "toolkit.__main__": HOST,
    "toolkit.node.agent": NODE_SCRIPT,
    "toolkit.node.facts": NODE_SCRIPT,
    "toolkit.node.gpu_control": NODE_SCRIPT,
    "toolkit.node.logpack": NODE_SCRIPT,
    "toolkit.node.startdiag": NODE_SCRIPT,
    "toolkit.node.common": NODE_SCRIPT,  # sent in front of each of them
    "toolkit.train.job": JOB_DRIVER,
    "toolkit.telemetry.record_job": JOB_DRIVER,
    "toolkit.telemetry.cluster_session": JOB_DRIVER,  # the driver side: train.job and record_job
    "toolkit.preflight.bandwidth.job": JOB_DRIVER,
    "toolkit.preflight.load.job": JOB_DRIVER,
    "toolkit.profile.vllm_bench": JOB_DRIVER,
    "toolkit.train.ray_worker": RAY_WORKER,
    "toolkit.telemetry.node_sampler": RAY_WORKER,  # the NodeSampler actor and its tasks
    "toolkit.telemetry.rank_files": RAY_WORKER,  # a task on each node, and the driver's loop
    "toolkit.telemetry.sampler": RAY_WORKER,  # in the NodeSampler actor (and python -m)
    "toolkit.preflight.ray_ranks": RAY_WORKER,  # Rank actors, for the preflight jobs
    "toolkit.torchrun.fanout": JOB_DRIVER,
    "toolkit.jobdriver.runtime": JOB_DRIVER,  # what train.job, fanout and record_job share
    "toolkit.torchrun.node_runner": RAY_WORKER,  # the TorchrunNode actor on every node
    "toolkit.markers.auto_steps": RAY_WORKER,  # in the user's ranks (torchrun -m, Ray Train)
    "toolkit.markers.script_runner": RAY_WORKER,  # every rank rtk torchrun starts
    "toolkit.markers.ray_train": RAY_WORKER,  # in a user's train_loop_per_worker
    "toolkit.ray_fanout": JOB_DRIVER,  # the drivers' loop over the nodes' tasks
    "toolkit.stall.collect": JOB_DRIVER,  # train.job's and torchrun.fanout's watchdog
    "toolkit.stall.check_job": JOB_DRIVER,  # rtk stall-check's job, on the head
    "toolkit.stall.node_evidence": RAY_WORKER,  # a task on each node
    "toolkit.power.node_power": RAY_WORKER,  # a task on each node: GPU limits and energy
    "toolkit.stall.stacks": RAY_WORKER,  # in that task
    "toolkit.stall.proc_state": RAY_WORKER,  # in that task
    "toolkit.stall.slow": JOB_DRIVER,  # the watchdog's SlowWatch; node_steps in a task on each node
}

# The framework callbacks (toolkit/markers/): the only modules that import their
# libraries, optional test dependencies that rtk itself never needs; no rtk module
# imports the callbacks.
FRAMEWORK_CALLBACKS = {
    "toolkit.markers.hf": "transformers",
    "toolkit.markers.lightning": "lightning",
    "toolkit.markers.ray_train": "ray",
}

# What code that runs under Ray must never reach: host-only packages and libraries.
RAY_FORBIDDEN = ("click", "fabric", "paramiko", "toolkit.cli", "toolkit.flows", "toolkit.transport")
# The only non-stdlib import a node script may make, and only inside a function.
NODE_SCRIPT_LAZY = ("ray",)
# Where the node scripts live (nothing else does), and what they share: sent with each.
NODE_SCRIPTS = "toolkit.node"
NODE_COMMON = "toolkit.node.common"


@dataclass(frozen=True)
class Import:
    """One import statement's target, as written, resolved to an absolute name."""

    module: str  # the importing module
    target: str  # e.g. toolkit.cluster.plan (or toolkit.cluster for "from toolkit import cluster")
    line: int
    in_function: bool
    type_checking: bool


def module_sources(root: str = PACKAGE) -> dict[str, str]:
    """Every module of the package: dotted name -> source text."""
    sources: dict[str, str] = {}
    for path in sorted((REPO / root).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        sources[".".join(parts)] = path.read_text(encoding="utf-8")
    return sources


def imports_of(module: str, source: str, is_package: bool = False) -> Iterator[Import]:
    """The imports in ``source``, relative ones made absolute."""

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(module, alias.name, child.lineno, in_function, type_checking)
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(module, child.module, child.level, is_package)
                for alias in child.names:
                    # "from a import b": a.b when b is a module, else a (``resolve``).
                    target = f"{base}.{alias.name}" if alias.name != "*" else base
                    yield Import(module, target, child.lineno, in_function, type_checking)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                yield from visit(ast.Module(body=child.body, type_ignores=[]), in_function, True)
                yield from visit(
                    ast.Module(body=child.orelse, type_ignores=[]), in_function, type_checking
                )
            else:
                inner = in_function or isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                )
                yield from visit(child, inner, type_checking)

    yield from visit(ast.parse(source), False, False)


def _absolute(module: str, name: str | None, level: int, is_package: bool) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def package_of(module: str) -> str:
    """The package of a module of ``toolkit``: its first name below ``toolkit``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def resolve(target: str, modules: Mapping[str, str]) -> str | None:
    """The module of the package an import target loads (None: not the package's)."""
    if target in modules:
        return target
    parent = target.rpartition(".")[0]
    return parent if parent in modules else None


def all_imports(modules: Mapping[str, str]) -> dict[str, list[Import]]:
    """Every module's imports."""
    packages = {name for name in modules if any(m.startswith(name + ".") for m in modules)}
    return {
        name: list(imports_of(name, source, name in packages)) for name, source in modules.items()
    }


def package_edges(
    graph: Mapping[str, list[Import]], modules: Mapping[str, str]
) -> dict[tuple[str, str], Import]:
    """(importing package, imported package) -> the first import that makes the edge."""
    edges: dict[tuple[str, str], Import] = {}
    for name, found in sorted(graph.items()):
        for imp in found:
            target = resolve(imp.target, modules)
            if target is None:
                continue
            edge = (package_of(name), package_of(target))
            if edge[0] != edge[1]:
                edges.setdefault(edge, imp)
    return edges


def upward_imports(
    graph: Mapping[str, list[Import]], modules: Mapping[str, str], order: list[str]
) -> list[str]:
    """Imports of a package listed later in ``order``, and packages not in it, as messages."""
    problems: list[str] = []
    place = {name: i for i, name in enumerate(order)}
    for name, found in graph.items():
        mine = package_of(name)
        if mine not in place:
            problems.append(f"{name}: package {mine!r} is not in {ORDER_FILE.name}; add it there")
            continue
        for imp in found:
            target = resolve(imp.target, modules)
            if target is None or target == name:
                continue
            theirs = package_of(target)
            if place.get(theirs, -1) > place[mine]:
                problems.append(
                    f"{name}:{imp.line} imports {target} ({theirs!r} comes after {mine!r} in "
                    f"{ORDER_FILE.name}); pass what it needs in, or move it"
                )
    return sorted(set(problems))


def package_cycles(graph: Mapping[str, list[Import]], modules: Mapping[str, str]) -> list[str]:
    """Every set of packages that import each other, however indirectly, with the imports
    that close it."""
    edges = package_edges(graph, modules)
    after: dict[str, set[str]] = {}
    for a, b in edges:
        after.setdefault(a, set()).add(b)
        after.setdefault(b, set())

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in after[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reachable = {p: reach(p) for p in after}
    cycles: list[str] = []
    done: set[str] = set()
    for p in sorted(after):
        if p in done or p not in reachable[p]:
            continue
        members = sorted(q for q in reachable[p] if p in reachable[q])
        done.update(members)
        inside = [
            f"{imp.module}:{imp.line} imports {resolve(imp.target, modules)}"
            for (a, b), imp in sorted(edges.items())
            if a in members and b in members
        ]
        cycles.append(f"packages {', '.join(members)} import each other: " + "; ".join(inside))
    return cycles


def reached(start: str, graph: Mapping[str, list[Import]], modules: Mapping[str, str]) -> set[str]:
    """Everything ``start`` loads, however indirectly (packages' __init__ included)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [
            ".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules
        ]
        for imp in graph.get(name, []):
            if imp.type_checking:
                continue
            target = resolve(imp.target, modules)
            if target is not None:
                todo.append(target)
            else:
                seen.add(imp.target)
    return seen


def placement_problems(
    graph: Mapping[str, list[Import]], modules: Mapping[str, str], runs_on: Mapping[str, str]
) -> list[str]:
    """Breaches of the rules of where code runs (see the module's docstring)."""
    problems: list[str] = []
    for name, source in modules.items():
        if name not in runs_on and '__name__ == "__main__"' in source:
            problems.append(f"{name} is an entrypoint; say where it runs in RUNS_ON")
        if name.startswith(NODE_SCRIPTS + ".") and runs_on.get(name) != NODE_SCRIPT:
            problems.append(f"{name} is in {NODE_SCRIPTS}, which holds only node scripts")
        if name == NODE_SCRIPTS and graph[name]:
            problems.append(f"{name} imports {graph[name][0].target}: it only names the scripts")
    for name, where in runs_on.items():
        if name not in modules:
            problems.append(f"{name} in RUNS_ON does not exist")
        elif where == NODE_SCRIPT:
            problems += _node_script_problems(name, graph[name])
        elif where in (JOB_DRIVER, RAY_WORKER):
            loaded = reached(name, graph, modules)
            bad = sorted(
                m for m in loaded for f in RAY_FORBIDDEN if m == f or m.startswith(f + ".")
            )
            if bad:
                problems.append(f"{name} ({where}) reaches host-only {', '.join(bad)}")
    return problems


def _node_script_problems(name: str, found: list[Import]) -> list[str]:
    problems = []
    for imp in found:
        top = imp.target.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            continue
        if imp.in_function and top in NODE_SCRIPT_LAZY:
            continue
        if name != NODE_COMMON and not imp.in_function and imp.target.startswith(NODE_COMMON + "."):
            continue  # from toolkit.node.common import NAME: sent with the script
        problems.append(f"{name}:{imp.line} (node script) imports {imp.target}: stdlib only")
    return problems


def check(
    modules: Mapping[str, str], runs_on: Mapping[str, str] = RUNS_ON, order: list[str] = ORDER
) -> tuple[list[str], list[str]]:
    """Imports against the order (cycles first), and breaches of where code runs."""
    graph = all_imports(modules)
    return (
        package_cycles(graph, modules) + upward_imports(graph, modules, order),
        placement_problems(graph, modules, runs_on),
    )


# --- the rules hold for toolkit/ ------------------------------------------------------


@pytest.fixture(scope="module")
def toolkit_modules() -> dict[str, str]:
    return module_sources()


def test_no_module_imports_a_package_listed_after_its_own(toolkit_modules: dict[str, str]) -> None:
    upward, _ = check(toolkit_modules)
    assert not upward, "\n".join(upward)


def test_no_packages_import_each_other(toolkit_modules: dict[str, str]) -> None:
    cycles = package_cycles(all_imports(toolkit_modules), toolkit_modules)
    assert cycles == [], "\n".join(cycles)


def command_cross_imports(modules: Mapping[str, str]) -> list[str]:
    """Imports of one command module (``toolkit.cli.cmd_*``) by another."""
    found = []
    for name, imports in sorted(all_imports(modules).items()):
        if not name.startswith("toolkit.cli.cmd_"):
            continue
        for imp in imports:
            target = resolve(imp.target, modules)
            if target and target.startswith("toolkit.cli.cmd_") and target != name:
                found.append(f"{name}:{imp.line} imports {target}")
    return found


def test_no_command_module_imports_another(toolkit_modules: dict[str, str]) -> None:
    assert command_cross_imports(toolkit_modules) == []
    # The check sees one, however it is spelled: in a function, relative or absolute.
    planted = {
        "toolkit.cli.cmd_a": "def f():\n    from toolkit.cli.cmd_b import b_cmd\n",
        "toolkit.cli.cmd_b": "from .cmd_a import f\n",
    }
    assert command_cross_imports(planted) == [
        "toolkit.cli.cmd_a:2 imports toolkit.cli.cmd_b",
        "toolkit.cli.cmd_b:1 imports toolkit.cli.cmd_a",
    ]


def test_the_order_lists_each_package_once_and_the_architecture_shows_it() -> None:
    packages = {"", "__main__"} | {
        p.name for p in (REPO / PACKAGE).iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    packages |= {p.stem for p in (REPO / PACKAGE).glob("*.py") if p.stem != "__init__"}
    assert sorted(ORDER) == sorted(set(ORDER)), "a package listed twice"
    assert set(ORDER) == packages
    # docs/architecture.md's table of the order: its package column, top to bottom.
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The order of packages", 1)[1].split("\n## ", 1)[0]
    shown = [
        name
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| #")
        for name in re.findall(r"`([a-z_]+)`", line.split("|")[2])
    ]
    assert shown == [p for p in ORDER if p], "docs/architecture.md shows another order"


def test_code_imports_only_what_is_there_where_it_runs(toolkit_modules: dict[str, str]) -> None:
    _, placement = check(toolkit_modules)
    assert not placement, "\n".join(placement)


def test_only_the_framework_callbacks_import_their_frameworks_and_nothing_imports_them(
    toolkit_modules: dict[str, str],
) -> None:
    optional = {lib for lib in FRAMEWORK_CALLBACKS.values() if lib != "ray"}
    found = []
    for name, imports in all_imports(toolkit_modules).items():
        for imp in imports:
            if resolve(imp.target, toolkit_modules) in FRAMEWORK_CALLBACKS:
                found.append(f"{name}:{imp.line} imports {imp.target}")
            elif imp.target.split(".")[0] in optional and name not in FRAMEWORK_CALLBACKS:
                found.append(f"{name}:{imp.line} imports {imp.target}, an optional framework")
    assert found == [], "\n".join(found)
    graph = all_imports(toolkit_modules)
    for name, library in FRAMEWORK_CALLBACKS.items():
        assert library in {imp.target.split(".")[0] for imp in graph[name]}, name


def test_the_checker_sees_the_whole_package(toolkit_modules: dict[str, str]) -> None:
    # A checker that read nothing would pass everything.
    assert {"toolkit.cluster.plan", "toolkit.node.agent", "toolkit.cli"} <= set(toolkit_modules)
    graph = all_imports(toolkit_modules)
    loaded = reached("toolkit.train.job", graph, toolkit_modules)
    assert {"ray", "toolkit.telemetry.cluster_session", "toolkit.train.loop", "torch"} <= loaded
    assert "toolkit.telemetry.node_sampler" in loaded  # through the session


# --- the checker fails on what it must catch (synthetic packages) ------------------------


def test_an_import_of_a_package_listed_later_is_named_with_its_line() -> None:
    modules = {
        "toolkit": "",
        "toolkit.transport": "",
        "toolkit.transport.base": "import os\nfrom toolkit.cluster.plan import ClusterPlan\n",
        "toolkit.cluster": "",
        "toolkit.cluster.plan": "",
    }
    upward, _ = check(modules, {})
    assert upward == [
        "toolkit.transport.base:2 imports toolkit.cluster.plan ('cluster' comes after "
        "'transport' in packages.txt); pass what it needs in, or move it"
    ]
    # The same import is fine the other way round in the order.
    upward, _ = check(modules, {}, order=["", "cluster", "transport"])
    assert upward == []


def test_packages_that_import_each_other_are_a_cycle_whatever_the_order() -> None:
    modules = {
        "toolkit": "",
        "toolkit.state": "",
        "toolkit.state.store": "from toolkit.credentials.tls import ClusterTls\n",
        "toolkit.credentials": "",
        "toolkit.credentials.tls": "",
        "toolkit.credentials.rotate": "def f():\n    from toolkit.cluster import plan\n",
        "toolkit.cluster": "",
        "toolkit.cluster.plan": "from toolkit.state.store import StateStore\n",
    }
    upward, _ = check(modules, {}, order=["", "state", "credentials", "cluster"])
    assert upward == [
        "packages cluster, credentials, state import each other: "
        "toolkit.cluster.plan:1 imports toolkit.state.store; "
        "toolkit.credentials.rotate:2 imports toolkit.cluster.plan; "
        "toolkit.state.store:1 imports toolkit.credentials.tls",
        "toolkit.credentials.rotate:2 imports toolkit.cluster.plan ('cluster' comes after "
        "'credentials' in packages.txt); pass what it needs in, or move it",
        "toolkit.state.store:1 imports toolkit.credentials.tls ('credentials' comes after "
        "'state' in packages.txt); pass what it needs in, or move it",
    ]


def test_lazy_relative_and_type_only_upward_imports_count() -> None:
    modules = {
        "toolkit": "",
        "toolkit.netenv": "",
        "toolkit.netenv.detect": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from toolkit.cli.options import decorators\n"
            "def f():\n    from ..cluster import plan\n"
        ),
        "toolkit.cluster": "",
        "toolkit.cluster.plan": "",
        "toolkit.cli": "",
        "toolkit.cli.options": "",
        "toolkit.cli.options.decorators": "",
    }
    upward, _ = check(modules, {})
    assert [p.split(" (")[0] for p in upward] == [
        "toolkit.netenv.detect:3 imports toolkit.cli.options.decorators",
        "toolkit.netenv.detect:5 imports toolkit.cluster.plan",
    ]


def test_a_package_not_in_the_order_is_named() -> None:
    upward, _ = check({"toolkit": "", "toolkit.newthing": ""}, {})
    assert upward == ["toolkit.newthing: package 'newthing' is not in packages.txt; add it there"]


def test_a_node_script_that_imports_rtk_or_a_library_is_named() -> None:
    modules = {
        "toolkit": "",
        "toolkit.node": "",
        "toolkit.node.agent": (
            "import json\nimport yaml\nfrom toolkit.errors import RtkError\n"
            "from toolkit.node.common import run_main\n"
            "def status():\n    import ray\n    from toolkit.node.common import x\n"
        ),
        "toolkit.node.common": "from toolkit.node.agent import probe\n",
        "toolkit.errors": "",
    }
    runs_on = {"toolkit.node.agent": NODE_SCRIPT, "toolkit.node.common": NODE_SCRIPT}
    _, placement = check(modules, runs_on)
    assert placement == [
        "toolkit.node.agent:2 (node script) imports yaml: stdlib only",
        "toolkit.node.agent:3 (node script) imports toolkit.errors.RtkError: stdlib only",
        "toolkit.node.agent:7 (node script) imports toolkit.node.common.x: stdlib only",
        "toolkit.node.common:1 (node script) imports toolkit.node.agent.probe: stdlib only",
    ]


def test_the_node_package_holds_only_node_scripts() -> None:
    modules = {
        "toolkit": "",
        "toolkit.node": "from toolkit.node.agent import probe\n",
        "toolkit.node.agent": "",
        "toolkit.node.probe_facts": "",
    }
    _, placement = check(modules, {"toolkit.node.agent": NODE_SCRIPT})
    assert placement == [
        "toolkit.node imports toolkit.node.agent.probe: it only names the scripts",
        "toolkit.node.probe_facts is in toolkit.node, which holds only node scripts",
    ]


def test_ray_code_that_reaches_click_indirectly_is_named() -> None:
    modules = {
        "toolkit": "",
        "toolkit.train": "",
        "toolkit.train.job": "import ray\nfrom toolkit.train import helpers\n",
        "toolkit.train.helpers": "def f():\n    from toolkit.cli.options.decorators import x\n",
        "toolkit.cli": "import click\n",
        "toolkit.cli.options.decorators": "",
    }
    _, placement = check(modules, {"toolkit.train.job": JOB_DRIVER})
    assert placement == [
        "toolkit.train.job (job driver) reaches host-only click, toolkit.cli, toolkit.cli.options.decorators"
    ]


def test_an_entrypoint_must_say_where_it_runs() -> None:
    modules = {
        "toolkit": "",
        "toolkit.train": "",
        "toolkit.train.new_job": 'if __name__ == "__main__":\n    pass\n',
    }
    _, placement = check(modules, {"toolkit.gone": RAY_WORKER})
    assert placement == [
        "toolkit.train.new_job is an entrypoint; say where it runs in RUNS_ON",
        "toolkit.gone in RUNS_ON does not exist",
    ]


def test_a_relative_import_in_a_package_init_resolves_from_the_package() -> None:
    modules = {
        "toolkit": "",
        "toolkit.transport": "from .base import Transport\nfrom ..cluster import state\n",
        "toolkit.transport.base": "",
        "toolkit.cluster": "",
        "toolkit.cluster.state": "",
    }
    upward, _ = check(modules, {})
    assert [p.split(" (")[0] for p in upward] == [
        "toolkit.transport:2 imports toolkit.cluster.state"
    ]
