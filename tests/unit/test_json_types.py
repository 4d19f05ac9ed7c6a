"""JsonObject is checked where dict[str, Any] is not: mypy refuses what JSON cannot hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO
from mypy import api as mypy_api

ACCEPTED = """
from toolkit.json_types import JsonObject
doc: JsonObject = {"a": 1, "b": [1.5, "x", None, {"c": True}], "d": {"e": []}}
"""

REFUSED = """
from toolkit.json_types import JsonObject
doc: JsonObject = {"a": object()}
nested: JsonObject = {"a": [{"b": {1, 2}}]}
n: int = doc["a"]
"""


def _mypy(tmp_path: Path, source: str) -> tuple[str, int]:
    path = tmp_path / "snippet.py"
    path.write_text(source)
    out, err, code = mypy_api.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(path)]
    )
    return out + err, code


def test_json_documents_type_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    out, code = _mypy(tmp_path, ACCEPTED)
    assert code == 0, out


def test_values_json_cannot_hold_and_unnarrowed_reads_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    out, code = _mypy(tmp_path, REFUSED)
    assert code == 1, out
    assert out.count("error:") == 3, out
