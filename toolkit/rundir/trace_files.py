"""Where a node's collected traces lie in the run directory, and in what order.

The names only, so that the run directory's layout can list traces without loading
Arrow: the format of a trace's contents is ``traces.py``'s.
"""

from __future__ import annotations

from pathlib import Path

TRACE_SUFFIX = ".arrows"
LEGACY_SAMPLES = "samples.jsonl"


def node_trace_files(node_dir: Path) -> list[Path]:
    """A collected node's traces in order: the legacy file first, then each segment."""
    if not node_dir.is_dir():
        return []
    legacy = node_dir / LEGACY_SAMPLES
    segments = sorted(node_dir.glob(f"trace-*{TRACE_SUFFIX}"))
    return ([legacy] if legacy.is_file() else []) + segments


def next_segment(node_dir: Path) -> Path:
    """Where a node's next collected trace goes (``trace-NNN.arrows``)."""
    taken = [p.name for p in node_dir.glob(f"trace-*{TRACE_SUFFIX}")] if node_dir.is_dir() else []
    return node_dir / f"trace-{len(taken) + 1:03d}{TRACE_SUFFIX}"
