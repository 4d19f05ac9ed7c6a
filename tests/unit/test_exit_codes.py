"""Every exit code rtk's commands use is explained in docs/cli.md's table."""

from __future__ import annotations

import ast
import re

from conftest import REPO

ROOT = REPO


def used_codes() -> dict[int, list[str]]:
    """Exit codes in toolkit/: errors' ``exit_code = N`` and the CLI's ``sys.exit(N)``."""
    codes: dict[int, list[str]] = {}
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["exit_code"]
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, int)
            ):
                codes.setdefault(node.value.value, []).append(where)
            elif (
                where.startswith("toolkit/cli/")
                and isinstance(node, ast.Call)
                and ast.unparse(node.func) == "sys.exit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                codes.setdefault(node.args[0].value, []).append(where)
    return codes


def documented_codes() -> set[int]:
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    return {int(code) for code in re.findall(r"^\| (\d+) \|", doc, re.MULTILINE)}


def test_the_scan_finds_the_error_classes_and_the_cli_exits() -> None:
    codes = used_codes()
    assert "toolkit/errors.py" in codes[3]  # FileProblemsError
    assert "toolkit/errors.py" in codes[7]  # SandboxError
    assert "toolkit/cli/__init__.py" in codes[130]


def test_the_docs_explain_every_exit_code() -> None:
    missing = {
        code: where for code, where in used_codes().items() if code not in documented_codes()
    }
    assert not missing, f"docs/cli.md's exit-code table lacks: {missing}"
    # click's usage errors exit 2 without rtk saying so in its own code.
    assert {0, 1, 2, 130} <= documented_codes()
