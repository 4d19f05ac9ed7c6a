"""Run directories with truncated, corrupted or hostile files: a report or rtk's error.

A valid run (tests/telemetry_fixtures.py, Arrow traces and the older JSONL ones) is
copied and damaged: a file cut short, bytes overwritten, garbage appended, a file
removed or emptied, a JSON value replaced by hostile data (node names that climb
out of the run: ``../../x``), a record rtk reads added with hostile content. Then:

- the report is built (``build_report``, its summary and terminal text), or the
  failure is rtk's own error (``RtkError``) with a one-line message;
- ``rtk report`` (rtk's real entry point, plots and page included) exits 0 or 1
  with rtk's one-line messages, and writes only into the run's ``report/``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pytest
from hostile_input import (
    examples,
    hostile_text,
    mutate,
    no_writes_outside,
    run_rtk,
    yaml_values,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from telemetry_fixtures import NodeSpec, RunSpec, build_run

from toolkit.errors import RtkError
from toolkit.telemetry.report import build_report, format_summary, summary_dict

RECORDS = ["train_config.json", "preflight.json", "idle.json", "command.json", "profile_run.json"]
NODE_NAMES = st.one_of(
    st.sampled_from(["../../outside", "..", ".", "a/b", "", "n1", "\n", "/etc", "x" * 300]),
    hostile_text(20),
)


@pytest.fixture(scope="module")
def templates() -> Iterator[list[Path]]:
    """Two pristine runs: Arrow traces, and the JSONL traces of older runs."""
    with TemporaryDirectory() as tmp:
        runs = []
        for trace_format in ("arrow", "jsonl"):
            spec = RunSpec(
                nodes=[NodeSpec("n1"), NodeSpec("n2", offset_s=0.3, gpus=2)],
                steps=6,
                rate_hz=5.0,
                restart_after=3,
                resume_from=2,
                trace_format=trace_format,
            )
            runs.append(build_run(Path(tmp), spec, name=trace_format).run_dir)
        yield runs


@st.composite
def damage(draw: st.DrawFn, files: list[str]) -> list[tuple[str, str, Any]]:
    """One to three damages: (action, file, argument)."""
    actions = []
    for _ in range(draw(st.integers(1, 3))):
        action = draw(
            st.sampled_from(
                ["truncate", "overwrite", "append", "remove", "empty", "json", "record", "nodes"]
            )
        )
        target = draw(st.sampled_from(files))
        if action == "truncate":
            argument: Any = draw(st.floats(0, 1))
        elif action in ("overwrite", "append"):
            argument = (draw(st.floats(0, 1)), draw(st.binary(min_size=1, max_size=64)))
        elif action == "json":
            argument = draw(st.integers(0, 2**16))  # picks a line and a value, below
        elif action == "record":
            target = draw(st.sampled_from(RECORDS))
            argument = json.dumps(draw(yaml_values()), default=str)
        elif action == "nodes":
            target = "telemetry/manifest.json"
            argument = draw(st.lists(NODE_NAMES, min_size=1, max_size=3))
        else:
            argument = None
        actions.append((action, target, argument))
    return actions


def apply(run: Path, actions: list[tuple[str, str, Any]], draw: Any) -> None:
    for action, name, argument in actions:
        path = run / name
        if action == "record":
            path.write_text(argument)
            continue
        if not path.is_file():
            continue
        data = path.read_bytes()
        if action == "truncate":
            path.write_bytes(data[: int(len(data) * argument)])
        elif action == "overwrite":
            at = int(len(data) * argument[0])
            path.write_bytes(data[:at] + argument[1] + data[at + len(argument[1]) :])
        elif action == "append":
            path.write_bytes(data + argument[1])
        elif action == "remove":
            path.unlink()
        elif action == "empty":
            path.write_bytes(b"")
        elif action == "json":
            path.write_text(_mutated_json(path.read_text(errors="replace"), draw))
        elif action == "nodes":
            try:
                manifest = json.loads(data)
                nodes = list(manifest["nodes"].values()) or [{}]
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # damaged already
            manifest["nodes"] = {n: nodes[i % len(nodes)] for i, n in enumerate(argument)}
            path.write_text(json.dumps(manifest))


def _mutated_json(text: str, draw: Any) -> str:
    """One JSON document, or one line of a JSONL file, with a value replaced."""
    lines = text.splitlines()
    if not lines:
        return text
    index = draw(st.integers(0, len(lines) - 1))
    try:
        value = json.loads(lines[index] if len(lines) > 1 else text)
    except ValueError:
        return text
    changed = mutate(draw, value, st.one_of(hostile_text(), yaml_values()))
    if len(lines) == 1 or text.lstrip().startswith("{\n"):
        return json.dumps(changed, default=str)
    lines[index] = json.dumps(changed, default=str)
    return "\n".join(lines) + "\n"


def files_of(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_damaged_run_is_a_report_or_rtks_one_line_error(
    templates: list[Path], data: st.DataObject
) -> None:
    template = data.draw(st.sampled_from(templates))
    with TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(template, run)
        apply(run, data.draw(damage(files_of(template))), data.draw)
        try:
            report = build_report(run)
        except RtkError as e:
            event(f"refused: {type(e).__name__}")
            assert str(e) and "\n" not in str(e).strip(), str(e)
            return
        event("report")
        json.dumps(summary_dict(report))
        format_summary(report, show_all=True)


@settings(max_examples=examples(4, long=30), suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.booleans())
def test_rtk_report_on_a_damaged_run_writes_only_its_report(
    templates: list[Path], data: st.DataObject, trace: bool
) -> None:
    template = data.draw(st.sampled_from(templates))
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "work" / "run"
        shutil.copytree(template, run)
        apply(run, data.draw(damage(files_of(template))), data.draw)
        args = ["report", "run", "--json"] + ([] if trace else ["--no-trace"])
        with no_writes_outside(root, allowed=[root / "home", run / "report"]):
            outcome = run_rtk(args, root)
    event(f"exit {outcome.code}")
    outcome.check_clean_failure((1,))
