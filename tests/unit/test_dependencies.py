"""pyproject.toml's dependencies say what toolkit/ imports: nothing undeclared, nothing unused.

Every third-party package toolkit/ imports (``import x``, ``from x import y``, also
inside functions, and ``importlib.import_module("x")``) must be declared, in the core
``dependencies`` or in an optional extra (torch, DeepSpeed and vLLM are imported only
by the features that need them). Every declared core dependency, and every package of
a feature extra, must be imported somewhere.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest
from conftest import REPO

ROOT = REPO

# Import name -> distribution where the two differ.
DISTRIBUTION = {
    "yaml": "pyyaml",
    "pynvml": "nvidia-ml-py",
}
# Imported packages that a declared distribution pins exactly, so declaring them apart
# would only fight that pin: pydantic_core is pydantic's own core.
COVERED_BY = {"pydantic_core": "pydantic"}

# Extras that install tools for working on rtk, not for running it.
TOOL_EXTRAS = {"dev"}


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them (PyYAML == pyyaml, a_b == a-b)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of(name: str) -> str:
    """The declared distribution that provides the import ``name``."""
    return normalize(COVERED_BY.get(name) or DISTRIBUTION.get(name, name))


def third_party_imports(root: Path) -> dict[str, set[str]]:
    """Top-level names of the non-stdlib packages imported under ``root`` -> the files."""
    found: dict[str, set[str]] = {}

    def add(module: str, path: Path) -> None:
        name = module.split(".")[0]
        if name and name != "toolkit" and name not in sys.stdlib_module_names:
            found.setdefault(name, set()).add(str(path.relative_to(root.parent)))

    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, path)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                add(node.module, path)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                add(node.args[0].value, path)
    return found


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, f"not a requirement: {requirement!r}"
    return normalize(match.group(0))


def declared(pyproject: dict[str, object]) -> dict[str, set[str]]:
    """Group ("core" or an extra's name) -> its distributions, ``rtk[x]`` resolved."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    raw: dict[str, list[str]] = {"core": list(project["dependencies"])}
    raw.update(project.get("optional-dependencies", {}))
    own = normalize(project["name"])

    def resolve(group: str, seen: frozenset[str] = frozenset()) -> set[str]:
        names: set[str] = set()
        for requirement in raw[group]:
            name = _requirement_name(requirement)
            if name != own:
                names.add(name)
                continue
            extras = re.search(r"\[([^\]]*)\]", requirement)
            for extra in extras.group(1).split(",") if extras else []:
                extra = extra.strip()
                assert extra in raw, f"{requirement!r} names an extra that does not exist"
                if extra not in seen:
                    names |= resolve(extra, seen | {group})
        return names

    return {group: resolve(group) for group in raw}


def problems(imports: dict[str, set[str]], groups: dict[str, set[str]]) -> list[str]:
    """What disagrees between the imports and the declared dependencies, one line each."""
    lines: list[str] = []
    runtime = {g: names for g, names in groups.items() if g not in TOOL_EXTRAS}
    anywhere = set().union(*runtime.values())
    imported = {distribution_of(name) for name in imports}
    for name, files in sorted(imports.items()):
        distribution = distribution_of(name)
        if distribution not in anywhere:
            lines.append(
                f"{name} (distribution {distribution}) is imported by {', '.join(sorted(files))}"
                " but declared neither in dependencies nor in an extra"
            )
    for group, names in sorted(runtime.items()):
        for distribution in sorted(names - imported):
            where = "dependencies" if group == "core" else f"the {group!r} extra"
            lines.append(f"{distribution} is declared in {where} but toolkit/ never imports it")
    return lines


@pytest.fixture(scope="module")
def imports() -> dict[str, set[str]]:
    return third_party_imports(ROOT / "toolkit")


@pytest.fixture(scope="module")
def groups() -> dict[str, set[str]]:
    return declared(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8")))


def test_pyproject_declares_what_toolkit_imports_and_nothing_else(
    imports: dict[str, set[str]], groups: dict[str, set[str]]
) -> None:
    assert problems(imports, groups) == []


def test_the_scan_sees_plain_lazy_and_importlib_imports(imports: dict[str, set[str]]) -> None:
    assert "toolkit/telemetry/report/figures/energy.py" in imports["numpy"]
    assert "toolkit/transport/hostkeys.py" in imports["paramiko"]
    assert "toolkit/train/strategies.py" in imports["deepspeed"]  # inside a function
    assert "toolkit/node/gpu_control.py" in imports["pynvml"]  # importlib.import_module
    assert not {"os", "json", "toolkit", "__future__"} & set(imports)


def test_extras_resolve_through_rtk_self_references(groups: dict[str, set[str]]) -> None:
    assert {"torch", "ray"} <= groups["train"]
    assert {"torch", "ray", "deepspeed"} <= groups["deepspeed"]
    assert {"numpy", "paramiko", "pyyaml", "nvidia-ml-py"} <= groups["core"]
    assert not {"rich", "psutil"} & groups["core"]


def test_an_undeclared_import_and_an_unused_dependency_are_both_reported() -> None:
    imports = {"numpy": {"toolkit/a.py"}, "yaml": {"toolkit/b.py"}, "requests": {"toolkit/c.py"}}
    groups = {"core": {"numpy", "pyyaml", "rich"}, "dev": {"pytest"}}
    assert problems(imports, groups) == [
        "requests (distribution requests) is imported by toolkit/c.py"
        " but declared neither in dependencies nor in an extra",
        "rich is declared in dependencies but toolkit/ never imports it",
    ]


def _installed(names: Iterable[str]) -> dict[str, list[str]]:
    known = packages_distributions()
    return {name: known[name] for name in names if name in known}


def test_import_names_map_to_the_distributions_that_install_them(
    imports: dict[str, set[str]],
) -> None:
    # Checked against this environment's metadata for every package installed here.
    for name, distributions in _installed(imports).items():
        if name in COVERED_BY:
            needs = {_requirement_name(r) for r in requires(COVERED_BY[name]) or []}
            assert {normalize(d) for d in distributions} <= needs, (name, distributions)
            continue
        expected = distribution_of(name)
        assert expected in {normalize(d) for d in distributions}, (name, distributions)
