"""The markdown summary: a section ready to append to docs/gpu.md (a pure function)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpu_acceptance.record import RunRecord

MAX_FIGURES_PER_STAGE = 40
# Left to the JSON: long text, and per-test lines the findings already name.
HIDDEN_KEYS = {"traceback", "output_tail", "tests", "tail"}
# A stage's own keys shown apart: findings in the list of findings, command lines
# (what a Ray stage runs, listed in every mode) as a code block.
TOP_LEVEL_APART = {"findings", "commands"}


def header(record: RunRecord) -> str:
    """The section's heading: the date, and the GPU, driver and CUDA versions."""
    day = record.date[:10]
    if record.mode == "dry-run":
        return f"## {day}: GPU acceptance, dry run"
    if record.mode == "cpu":
        return f"## {day}: GPU acceptance, CPU mode (no GPU)"
    count = f"{record.gpu_count} x " if record.gpu_count > 1 else ""
    return (
        f"## {day}: GPU acceptance on {count}{record.gpu_model or 'an unknown GPU'} "
        f"(driver {record.driver_version or '?'}, CUDA {record.cuda_version or '?'})"
    )


def render(record: RunRecord) -> str:
    """The whole summary."""
    counts = record.counts()
    lines = [
        header(record),
        "",
        f"`{' '.join(record.command)}` on {record.host}: {record.mode} mode, "
        f"torch {record.torch_version or 'not installed'}, Python {record.python_version}, "
        f"{record.duration_s:.0f} s; {counts['ok']} ok, {counts['failed']} failed, "
        f"{counts['skipped']} skipped.",
        "",
        "| # | stage | status | time | result |",
        "|---|---|---|---|---|",
    ]
    for i, stage in enumerate(record.stages, 1):
        lines.append(
            f"| {i} | {stage.name} | {stage.status} | {stage.duration_s:.0f} s | "
            f"{_cell(stage.reason)} |"
        )
    findings = list(_findings(record))
    if findings:
        lines += ["", "Findings:", ""] + [f"- {f}" for f in findings]
    for stage in record.stages:
        figures = list(_figures(stage.measurements))
        commands = [str(c) for c in stage.measurements.get("commands") or []]
        if not figures and not commands:
            continue
        lines += ["", f"### {stage.name}", ""]
        shown = figures[:MAX_FIGURES_PER_STAGE]
        lines += [f"- {key}: {value}" for key, value in shown]
        if len(figures) > len(shown):
            lines.append(f"- ... {len(figures) - len(shown)} more in gpu-acceptance.json")
        if commands:
            lines += ([""] if figures else []) + ["```sh", *commands, "```"]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= 160 else text[:157] + "..."


def _findings(record: RunRecord) -> Iterator[str]:
    """Failures, and in GPU mode every skip that was not asked for."""
    for stage in record.stages:
        if stage.status == "failed":
            yield f"{stage.name} failed: {_cell(stage.reason)}"
            for error in [e for e in stage.errors if e != stage.reason][:8]:
                yield f"{stage.name}: {_cell(error)}"
        elif (
            record.mode == "gpu"
            and stage.status == "skipped"
            and not stage.reason.startswith("not selected")
        ):
            yield f"{stage.name} skipped: {_cell(stage.reason)}"
        for note in stage.measurements.get("findings", []):
            yield f"{stage.name}: {_cell(str(note))}"


def _figures(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted key, formatted value)`` for every leaf, lists of numbers kept whole."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in HIDDEN_KEYS or (not prefix and key in TOP_LEVEL_APART):
                continue
            yield from _figures(inner, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and not all(isinstance(v, (int, float, str)) for v in value):
        for i, inner in enumerate(value):
            yield from _figures(inner, f"{prefix}[{i}]")
    else:
        yield prefix, _format(value)


def _format(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return (
            "[" + ", ".join(_format(v) for v in value[:12]) + (", ...]" if len(value) > 12 else "]")
        )
    return _cell(str(value))
