"""DCGM diagnostics (``dcgmi diag -r 1 -j``) read from their JSON, graded per node.

Two shapes exist, both written by ``dcgmi/Diag.cpp`` in https://github.com/NVIDIA/DCGM
(key names in ``nvvs/include/NvvsJsonStrings.h``):

- DCGM 4: ``{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status",
  "warnings": [{"warning", "error_id", "error_category", "error_severity"}], "info":
  [...]}], "test_summary": {"status"}}]}]}, "entity_groups": [...], "metadata":
  {"version", "Driver Version Detected"}}`` (the schema is
  ``testing/python3/dcgm_diag_schema.json``);
- DCGM 2 and 3: the root key is ``"DCGM GPU Diagnostic"``, a result names its GPU as
  ``"gpu_id": "0"``, ``version`` sits at the top, and ``info`` is one string.

A diagnostic that could not run prints ``{<root>: {"version", "runtime_error"}}``;
``--iterations`` wraps runs in ``{"iterations": [...], "Overall Result"}``. Statuses
are ``Pass``, ``Skip``, ``Warn`` and ``Fail``. Anything else, or text that is not JSON,
is reported as unreadable rather than raised: one node's odd output must not stop the
others' checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from toolkit.rundir.preflight import Check, Status

DiagStatus = Literal["pass", "skip", "warn", "fail"]
ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
_STATUS: dict[str, DiagStatus] = {"pass": "pass", "skip": "skip", "warn": "warn", "fail": "fail"}


@dataclass(frozen=True)
class DcgmWarning:
    """One error DCGM attached to a result.

    Attributes:
        message: DCGM's text.
        error_id: Its ``DCGM_FR_*`` code, when given.
        severity: ``dcgmErrorSeverity_t``: 1 monitor, 2 isolate, 4 triage, 5 config,
            6 reset (``dcgm_errors.h``); None when not given.
    """

    message: str
    error_id: int | None = None
    severity: int | None = None


@dataclass(frozen=True)
class DcgmResult:
    """One test's result on one entity (a GPU), or for the whole run.

    Attributes:
        category: ``Deployment``, ``Hardware``, ``Integration``, ``Stress``...
        test: The test's name.
        entity: ``GPU 0``; empty for a result that names no entity.
        status: pass, skip, warn or fail.
        warnings: Errors DCGM gave for it.
        info: DCGM's notes (why a test skipped, for one).
    """

    category: str
    test: str
    entity: str
    status: DiagStatus
    warnings: tuple[DcgmWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmDiag:
    """One ``dcgmi diag`` run as read.

    Attributes:
        version: DCGM's version, when printed.
        results: Every result, in the order printed.
        error: Why the run (or its output) is not a diagnostic: DCGM's runtime error,
            or what is wrong with the text; None for a complete run.
    """

    version: str | None
    results: tuple[DcgmResult, ...]
    error: str | None = None


def parse_dcgm_diag(text: str) -> DcgmDiag:
    """Read ``dcgmi diag -j`` output (either shape); never raises."""
    try:
        data = json.loads(text)
    except ValueError as e:
        return DcgmDiag(None, (), f"output is not JSON ({e}): {_clip(text)}")
    return _from_json(data, text)


def _from_json(data: Any, text: str) -> DcgmDiag:
    if not isinstance(data, Mapping):
        return DcgmDiag(None, (), f"output is not a JSON object: {_clip(text)}")
    iterations = data.get("iterations")
    if isinstance(iterations, list):
        runs = [_from_json(i, text) for i in iterations]
        errors = [r.error for r in runs if r.error]
        return DcgmDiag(
            next((r.version for r in runs if r.version), None),
            tuple(result for r in runs for result in r.results),
            "; ".join(errors) or None,
        )
    root_key = next((k for k in ROOTS if isinstance(data.get(k), Mapping)), None)
    if root_key is None:
        return DcgmDiag(None, (), f"no '{ROOTS[0]}' object in the output: {_clip(text)}")
    root: Mapping[str, Any] = data[root_key]
    metadata = data.get("metadata")
    version = _text(
        (metadata.get("version") if isinstance(metadata, Mapping) else None)
        or data.get("version")
        or root.get("version")
    )
    runtime_error = _text(root.get("runtime_error"))
    results: list[DcgmResult] = []
    problems: list[str] = []
    categories = root.get("test_categories")
    for category in categories if isinstance(categories, list) else []:
        if not isinstance(category, Mapping):
            problems.append("a test category is not an object")
            continue
        name = _text(category.get("category")) or "?"
        tests = category.get("tests")
        for test in tests if isinstance(tests, list) else []:
            if isinstance(test, Mapping):
                results += _test_results(name, test, problems)
            else:
                problems.append(f"a test of {name} is not an object")
    if runtime_error is None and not results and not problems:
        problems.append("no test results")
    error = "; ".join(([runtime_error] if runtime_error else []) + problems) or None
    return DcgmDiag(version, tuple(results), error)


def _test_results(category: str, test: Mapping[str, Any], problems: list[str]) -> list[DcgmResult]:
    name = _text(test.get("name")) or "?"
    entries = test.get("results")
    if not isinstance(entries, list) or not entries:
        summary = test.get("test_summary")
        entries = [summary] if isinstance(summary, Mapping) else []
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            problems.append(f"a result of {name} is not an object")
            continue
        status = _STATUS.get(str(entry.get("status", "")).strip().lower())
        if status is None:
            problems.append(f"{name}: unknown status {entry.get('status')!r}")
            continue
        out.append(
            DcgmResult(category, name, _entity(entry), status, _warnings(entry), _info(entry))
        )
    return out


def _entity(entry: Mapping[str, Any]) -> str:
    if "entity_id" in entry:
        return f"{_text(entry.get('entity_group')) or 'entity'} {entry['entity_id']}"
    gpu = entry.get("gpu_id", entry.get("gpu_ids"))
    return f"GPU {gpu}" if gpu is not None and gpu != "" else ""


def _warnings(entry: Mapping[str, Any]) -> tuple[DcgmWarning, ...]:
    found = entry.get("warnings")
    out = []
    for item in found if isinstance(found, list) else []:
        if not isinstance(item, Mapping):
            continue
        # DCGM 3's deployment tests wrote the text under "warnings" inside each item.
        message = _text(item.get("warning")) or _text(item.get("warnings")) or ""
        out.append(
            DcgmWarning(message, _int(item.get("error_id")), _int(item.get("error_severity")))
        )
    return tuple(out)


def _info(entry: Mapping[str, Any]) -> tuple[str, ...]:
    info = entry.get("info")
    if isinstance(info, str):
        return (info,) if info else ()
    return tuple(str(i) for i in info) if isinstance(info, list) else ()


def dcgm_checks(node: str, diag: DcgmDiag, level: int = 1) -> list[Check]:
    """One ``gpu.dcgm_diag`` check for the node.

    Fails on any failed test; warns on a warning, on a run that could not complete
    (or whose output is unreadable), and on a run where nothing passed. Skipped tests
    are named either way.
    """
    failed = [r for r in diag.results if r.status == "fail"]
    warned = [r for r in diag.results if r.status == "warn"]
    skipped = sorted({r.test for r in diag.results if r.status == "skip"})
    passed = sum(r.status == "pass" for r in diag.results)
    parts = [_describe(r) for r in failed + warned]
    if diag.error:
        parts.append(f"diagnostic incomplete: {diag.error}")
    if not parts:
        parts.append(f"{passed} result(s) passed")
    if skipped:
        parts.append(f"skipped: {', '.join(skipped)}")
    status: Status = "fail" if failed else "warn" if warned or diag.error or not passed else "pass"
    measured = "; ".join(parts) + (f" (DCGM {diag.version})" if diag.version else "")
    return [
        Check(
            "gpu.dcgm_diag",
            node,
            status,
            measured,
            f"dcgmi diag -r {level}: no failed test",
            "" if status == "pass" else _HINT,
        )
    ]


_HINT = (
    "DCGM's diagnostic found a problem: rerun dcgmi diag -r 2 on the node for detail, "
    "act on the error (its DCGM_FR code names it), and drain the node until it passes; "
    "an incomplete run usually means nv-hostengine is not running or another process "
    "holds the GPUs"
)


def _describe(result: DcgmResult) -> str:
    who = f"{result.test} on {result.entity}" if result.entity else result.test
    text = f"{who}: {result.status}"
    if result.warnings:
        first = result.warnings[0]
        code = f" [error {first.error_id}]" if first.error_id is not None else ""
        more = f" (+{len(result.warnings) - 1} more)" if len(result.warnings) > 1 else ""
        text += f": {_clip(first.message, 160)}{code}{more}"
    return text


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return str(value).strip() or None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
