"""The import rules of ``toolkit/``, read from the source (ast; nothing is imported).

Layers, low to high; a module may import its own layer and the layers below, never
one above (``LAYERS``). Where code runs decides what it may import (``RUNS_ON``):

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
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pytest
from conftest import REPO

PACKAGE = "toolkit"

LAYERS: dict[str, int] = {
    # 0: no rtk imports but each other
    "": 0,  # the package itself (toolkit/__init__.py)
    "errors": 0,
    "fields": 0,  # the typed reader of JSON objects, for records and node answers
    "json_types": 0,  # the type of a JSON document
    "shell": 0,
    "resources": 0,
    "ray_resources": 0,
    "ray_fanout": 0,  # a task pinned to each Ray node, a bounded window (rank_files, stall)
    "rundir": 0,  # the run directory: layout and records, shared by every layer
    "wallclock": 0,  # the clock samples and markers are stamped with
    "driver_gate": 0,  # a driver started ahead waits there (stdlib only)
    "markers": 0,  # the public marker API, in the user's own processes (stdlib only)
    # 1: the inventory
    "inventory": 1,
    # 2: reaching nodes, and what runs on them
    "transport": 2,
    "netenv": 2,
    "node": 2,  # the scripts that run on nodes (stdlib only; see RUNS_ON)
    "nodeinfo": 2,  # rtk's side of them: calling them, reading their answers
    "simulation": 2,  # a simulated cluster of any size behind a transport, for tests and benchmarks
    # 3: what rtk does with a cluster
    "cluster": 3,
    "jobs": 3,  # Ray jobs: submit, follow, the local driver, the runtime env
    "credentials": 3,  # the cluster's token and TLS files, and what points Ray at them
    "state": 3,  # what rtk keeps on this machine per cluster (state.json, credentials)
    "slurm": 3,
    "gpu": 3,
    "preflight": 3,
    "telemetry": 3,
    "train": 3,
    "profile": 3,
    "torchrun": 3,  # rtk torchrun: the spec, the checks, the job's driver and node actor
    "power": 3,  # online power limits: the controllers, the driver thread, their record
    "stall": 3,  # the stall watchdog: detecting a stall, the ranks' evidence, the diagnosis
    "sandbox": 3,
    # 4: whole flows (up, train, profile) that the CLI and batch scripts call
    "flows": 4,
    # 5: the command line
    "cli": 5,
    "__main__": 5,
}

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
    "toolkit.telemetry.session": JOB_DRIVER,  # the driver side: train.job and record_job
    "toolkit.preflight.bandwidth.job": JOB_DRIVER,
    "toolkit.preflight.load.job": JOB_DRIVER,
    "toolkit.profile.vllm_bench": JOB_DRIVER,
    "toolkit.train.ray_worker": RAY_WORKER,
    "toolkit.telemetry.node_sampler": RAY_WORKER,  # the NodeSampler actor and its tasks
    "toolkit.telemetry.rank_files": RAY_WORKER,  # a task on each node, and the driver's loop
    "toolkit.telemetry.sampler": RAY_WORKER,  # in the NodeSampler actor (and python -m)
    "toolkit.preflight.ray_ranks": RAY_WORKER,  # Rank actors, for the preflight jobs
    "toolkit.torchrun.fanout": JOB_DRIVER,
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
    "toolkit.stall.procs": RAY_WORKER,  # in that task
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


def layer_of(module: str) -> str:
    """The layer name of a module of the package: its first name below ``toolkit``."""
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


def upward_imports(graph: Mapping[str, list[Import]], modules: Mapping[str, str]) -> list[str]:
    """Imports of a higher layer, and modules in no layer, as messages."""
    problems: list[str] = []
    for name, found in graph.items():
        mine = layer_of(name)
        if mine not in LAYERS:
            problems.append(f"{name}: package {mine!r} is in no layer; add it to LAYERS")
            continue
        for imp in found:
            target = resolve(imp.target, modules)
            if target is None or target == name:
                continue
            theirs = layer_of(target)
            if LAYERS.get(theirs, -1) > LAYERS[mine]:
                problems.append(
                    f"{name}:{imp.line} imports {target} "
                    f"(layer {theirs!r} is above {mine!r}); pass what it needs in, or move it"
                )
    return sorted(set(problems))


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
    modules: Mapping[str, str], runs_on: Mapping[str, str] = RUNS_ON
) -> tuple[list[str], list[str]]:
    """Upward imports, and breaches of where code runs, for ``modules``."""
    graph = all_imports(modules)
    return upward_imports(graph, modules), placement_problems(graph, modules, runs_on)


# --- the rules hold for toolkit/ ------------------------------------------------------


@pytest.fixture(scope="module")
def toolkit_modules() -> dict[str, str]:
    return module_sources()


def test_no_module_imports_a_higher_layer(toolkit_modules: dict[str, str]) -> None:
    upward, _ = check(toolkit_modules)
    assert not upward, "\n".join(upward)


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
    assert {"ray", "toolkit.telemetry.session", "toolkit.train.loop", "torch"} <= loaded
    assert "toolkit.telemetry.node_sampler" in loaded  # through the session


# --- the checker fails on what it must catch (synthetic packages) ------------------------


def test_an_upward_import_is_named_with_its_line() -> None:
    modules = {
        "toolkit": "",
        "toolkit.transport": "",
        "toolkit.transport.base": "import os\nfrom toolkit.cluster.plan import ClusterPlan\n",
        "toolkit.cluster": "",
        "toolkit.cluster.plan": "from toolkit.transport.base import X\n",
    }
    upward, _ = check(modules, {})
    assert upward == [
        "toolkit.transport.base:2 imports toolkit.cluster.plan "
        "(layer 'cluster' is above 'transport'); pass what it needs in, or move it"
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


def test_a_package_in_no_layer_is_named() -> None:
    upward, _ = check({"toolkit": "", "toolkit.newthing": ""}, {})
    assert upward == ["toolkit.newthing: package 'newthing' is in no layer; add it to LAYERS"]


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
