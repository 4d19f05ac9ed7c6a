"""Every exception class of ``toolkit/`` is an ``RtkError``, read from the source (ast).

rtk has one exception hierarchy (``toolkit/errors.py``): the CLI turns an ``RtkError``
into one line and its ``exit_code``; an exception class that derives from a builtin
one (``ValueError``, ``Exception``...) instead escapes that and reaches the user as a
traceback. So every exception class derives, directly or through other rtk classes,
from ``RtkError``, and none also derives from a builtin exception. Nothing is imported:
the classes and their bases are read with ``ast`` and the names resolved through each
module's imports. The node scripts (``toolkit/node/``) run on nodes with the standard
library only and cannot import rtk: their ``ScriptError`` family is theirs.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO

PACKAGE = "toolkit"
ROOT_ERROR = ("toolkit.errors", "RtkError")
EXEMPT = ("toolkit.node",)  # stdlib-only node scripts
BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)
# A base from outside rtk whose class cannot be read here counts as an exception by name.
EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning", "Exit", "Interrupt")


@dataclass(frozen=True)
class Module:
    """One module's classes (name -> bases as written, line) and its import bindings."""

    name: str
    path: str
    classes: dict[str, tuple[tuple[str, ...], int]]
    imported: dict[str, tuple[str, str]]  # local name -> (module, name) of "from M import N"
    modules: dict[str, str]  # local name -> module, of "import M" and "import M as X"


@dataclass(frozen=True)
class Verdict:
    """What a class is: an exception at all, and one of rtk's (reaching ``RtkError``)."""

    exception: bool
    rtk: bool


def read_modules(root: Path) -> dict[str, Module]:
    """Every module under ``root / PACKAGE``, parsed."""
    modules: dict[str, Module] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes: dict[str, tuple[tuple[str, ...], int]] = {}
        imported: dict[str, tuple[str, str]] = {}
        bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (tuple(ast.unparse(b) for b in node.bases), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(max(node.level - 1, 0)):
                    package = package.rpartition(".")[0]
                source = ".".join(p for p in (package if node.level else "", node.module) if p)
                for alias in node.names:
                    imported[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        bound[top] = top
        modules[name] = Module(name, str(path.relative_to(root)), classes, imported, bound)
    return modules


def resolve(modules: dict[str, Module], module: str, dotted: str) -> tuple[str, str] | str:
    """Where a base class written as ``dotted`` in ``module`` is defined.

    Returns:
        ``(module, class)`` for a class defined in rtk, else the name as written
        (a builtin's, or a library's such as ``click.Command``).
    """
    first, *rest = dotted.split(".")
    scope = modules[module]
    if first in scope.classes and not rest:
        return (module, first)
    if first in scope.imported:
        source, name = scope.imported[first]
        if f"{source}.{name}" in modules:
            return _in_module(modules, f"{source}.{name}", rest, dotted)
        return _in_module(modules, source, [name, *rest], dotted)
    if first in scope.modules:
        return _in_module(modules, scope.modules[first], rest, dotted)
    return dotted


def _in_module(
    modules: dict[str, Module], module: str, parts: list[str], dotted: str, depth: int = 0
) -> tuple[str, str] | str:
    """``parts`` looked up from ``module``: submodules, classes, re-exported names."""
    while parts and f"{module}.{parts[0]}" in modules:
        module, parts = f"{module}.{parts[0]}", parts[1:]
    if module not in modules or len(parts) != 1 or depth > 10:
        return dotted
    name = parts[0]
    if name in modules[module].classes:
        return (module, name)
    if name in modules[module].imported:  # re-exported, as by a package's __init__
        source, original = modules[module].imported[name]
        return _in_module(modules, source, [original], dotted, depth + 1)
    return dotted


def verdicts(modules: dict[str, Module]) -> dict[tuple[str, str], Verdict]:
    """Each class of the package: is it an exception, and does it reach ``RtkError``?"""
    found: dict[tuple[str, str], Verdict] = {}

    def verdict(key: tuple[str, str], seen: frozenset[tuple[str, str]]) -> Verdict:
        if key == ROOT_ERROR:
            return Verdict(exception=True, rtk=True)
        if key in found:
            return found[key]
        exception = rtk = False
        for base in modules[key[0]].classes[key[1]][0]:
            where = resolve(modules, key[0], base)
            if isinstance(where, tuple):
                if where not in seen:
                    of_base = verdict(where, seen | {where})
                    exception, rtk = exception or of_base.exception, rtk or of_base.rtk
            elif where in BUILTIN_EXCEPTIONS or where.endswith(EXCEPTION_SUFFIXES):
                exception = True
        found[key] = Verdict(exception, rtk)
        return found[key]

    for module in modules.values():
        for name in module.classes:
            verdict((module.name, name), frozenset({(module.name, name)}))
    return found


def violations(root: Path) -> list[str]:
    """Every exception class outside the node scripts that is not purely an rtk one."""
    modules = read_modules(root)
    wrong: list[str] = []
    for (module, name), verdict in sorted(verdicts(modules).items()):
        if not verdict.exception or (module, name) == ROOT_ERROR:
            continue
        if any(module == m or module.startswith(m + ".") for m in EXEMPT):
            continue
        bases, line = modules[module].classes[name]
        foreign = [
            base
            for base in bases
            if isinstance(where := resolve(modules, module, base), str)
            and (where in BUILTIN_EXCEPTIONS or where.endswith(EXCEPTION_SUFFIXES))
        ]
        if foreign or not verdict.rtk:
            why = f"derives from {', '.join(foreign)}" if foreign else "does not reach RtkError"
            wrong.append(f"{modules[module].path}:{line} class {name}: {why}")
    return wrong


def test_every_exception_class_of_rtk_derives_from_rtk_error() -> None:
    wrong = violations(REPO)
    assert not wrong, (
        "exception classes outside the one hierarchy (derive from RtkError or one of its "
        "kin in toolkit/errors.py):\n" + "\n".join(wrong)
    )


def test_the_scan_reads_rtk_s_exception_classes_through_their_imports() -> None:
    found = verdicts(read_modules(REPO))
    for key in [
        ("toolkit.errors", "SandboxError"),
        ("toolkit.jobs.runtime_env", "RuntimeEnvError"),
        ("toolkit.state.tls", "TlsError"),  # through StateError
        ("toolkit.flows.outcome", "PreflightFailedError"),  # through PreflightError
    ]:
        assert found[key] == Verdict(exception=True, rtk=True), key
    # The node scripts' own family is an exception family, but not rtk's (exempt).
    assert found[("toolkit.node.common", "ScriptError")] == Verdict(exception=True, rtk=False)
    assert found[("toolkit.node.gpu_control", "ControlError")].exception


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_check_catches_a_class_that_derives_from_a_builtin_exception(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "toolkit/__init__.py": "",
            "toolkit/errors.py": (
                "class RtkError(Exception):\n    pass\nclass ClusterError(RtkError):\n    pass\n"
            ),
            "toolkit/a/__init__.py": "from toolkit.a.b import Good\n",
            "toolkit/a/b.py": (
                "from toolkit.errors import RtkError\n"
                "class Good(RtkError):\n    pass\n"
                "class Bad(ValueError):\n    pass\n"
                "class Mixed(Good, KeyError):\n    pass\n"
                "class Plain:\n    pass\n"
            ),
            "toolkit/c.py": (
                "import click\n"
                "import requests\n"
                "import toolkit.errors as E\n"
                "from toolkit import errors\n"
                "from toolkit.a import Good\n"
                "from toolkit.node.common import ScriptError\n"
                "class ViaPackage(Good):\n    pass\n"
                "class ViaModule(errors.ClusterError):\n    pass\n"
                "class ViaAlias(E.RtkError):\n    pass\n"
                "class Command(click.Command):\n    pass\n"
                "class Library(requests.HTTPError):\n    pass\n"
                "class Borrowed(ScriptError):\n    pass\n"
                "def f():\n    class Inner(RuntimeError):\n        pass\n"
            ),
            "toolkit/node/__init__.py": "",
            "toolkit/node/common.py": (
                "class ScriptError(Exception):\n    pass\n"
                "class UsageError(ScriptError):\n    pass\n"
            ),
        },
    )
    assert violations(tmp_path) == [
        "toolkit/a/b.py:4 class Bad: derives from ValueError",
        "toolkit/a/b.py:6 class Mixed: derives from KeyError",
        "toolkit/c.py:17 class Borrowed: does not reach RtkError",
        "toolkit/c.py:20 class Inner: derives from RuntimeError",
        "toolkit/c.py:15 class Library: derives from requests.HTTPError",
    ]
