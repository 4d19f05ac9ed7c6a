"""tests/unit mirrors toolkit/: a module's test is found from its path alone.

``toolkit/<package>/<module>.py`` is tested in ``tests/unit/<package>/test_<module>.py``.
The modules with no test file of their own name yet (tested through their callers'
tests) are listed in ``modules_without_own_test.txt`` beside this file; a new module
must come with its test file, and a listed module that has one now, or is gone, must
leave the list.
"""

from __future__ import annotations

from pathlib import Path

from conftest import REPO

TOOLKIT = REPO / "toolkit"
UNIT = REPO / "tests" / "unit"
LISTED = UNIT / "modules_without_own_test.txt"
NOT_MODULES = {"__init__.py", "__main__.py"}


def own_test(module: Path) -> Path:
    """Where ``module``'s own test file lives."""
    relative = module.relative_to(TOOLKIT)
    return UNIT / relative.parent / f"test_{relative.name}"


def modules() -> list[Path]:
    return sorted(p for p in TOOLKIT.rglob("*.py") if p.name not in NOT_MODULES)


def listed() -> set[str]:
    lines = LISTED.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_new_module_has_a_test_file_of_its_own_name() -> None:
    without = {str(m.relative_to(TOOLKIT)) for m in modules() if not own_test(m).is_file()}
    new = sorted(without - listed())
    assert new == [], (
        f"modules without tests/unit/<package>/test_<module>.py: {new}; add the test file "
        "(a module's behaviour is tested under its own name)"
    )


def test_the_list_names_only_modules_that_still_lack_one() -> None:
    stale = sorted(
        name
        for name in listed()
        if not (TOOLKIT / name).is_file() or own_test(TOOLKIT / name).is_file()
    )
    assert stale == [], f"{LISTED.name}: take these off the list (gone, or tested now): {stale}"
