"""Stage 1: every GPU-marked test of rtk (``pytest -m gpu``); none may skip here.

Only the test files that carry the ``gpu`` mark are collected (the others import
Ray, fabric and the sandbox, which a bare GPU machine may lack). The vLLM test gets a
tiny model built on the spot (``RTK_VLLM_MODEL_DIR``) when transformers imports.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from gpu_acceptance import procs
from gpu_acceptance.context import StageContext

MARK = re.compile(r"^\s*@pytest\.mark\.gpu\b", re.MULTILINE)  # the decorator, not a mention
PYTEST_TIMEOUT_S = 140.0


def gpu_test_files(repo: Path) -> list[str]:
    """The test files (relative to ``repo``) that hold a GPU-marked test."""
    found = []
    for path in sorted((repo / "tests").rglob("test_*.py")):
        if MARK.search(path.read_text(encoding="utf-8", errors="replace")):
            found.append(str(path.relative_to(repo)))
    return found


def parse_junit(text: str) -> tuple[dict[str, int], list[dict[str, str]]]:
    """Counts by outcome and one entry per test from pytest's ``--junitxml`` file."""
    root = ET.fromstring(text)
    cases: list[dict[str, str]] = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or child.text or "").strip()
                break
        name = ".".join(p for p in (case.get("classname", ""), case.get("name", "")) if p)
        cases.append(
            {
                "test": name,
                "outcome": outcome,
                "message": message.splitlines()[0][:300] if message else "",
            }
        )
    counts = {
        k: sum(1 for c in cases if c["outcome"] == k)
        for k in ("passed", "failed", "error", "skipped")
    }
    counts["tests"] = len(cases)
    return counts, cases


def describe(ctx: StageContext) -> str:
    """What the stage would do."""
    files = gpu_test_files(Path(ctx.repo))
    return f"run pytest -m gpu on {len(files)} test files ({', '.join(files)})"


def run(ctx: StageContext, io: Any) -> None:
    """Run the GPU tests and record every outcome."""
    if not ctx.has("pytest"):
        raise io.skip("pytest does not import")
    repo = Path(ctx.repo)
    files = gpu_test_files(repo)
    io.measure("files", files)
    io.measure("root", os.geteuid() == 0)
    extra: dict[str, str] = {}
    if ctx.has("transformers"):
        # Even without vLLM: its test then fails for the real reason, not for the model.
        from gpu_acceptance.tinymodel import build_tiny_model

        try:
            extra["RTK_VLLM_MODEL_DIR"] = str(build_tiny_model(ctx.work_dir / "tiny-llm"))
            io.measure("vllm_model", "a tiny Llama built from a config (random weights)")
        except Exception as e:  # noqa: BLE001 - the other tests still run
            io.measure("vllm_model", f"could not be built: {type(e).__name__}: {e}")
    junit = ctx.work_dir / "pytest-gpu.xml"
    argv = [ctx.python, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-rA"]
    argv += ["--continue-on-collection-errors", f"--junitxml={junit}", *files]
    done = procs.run(argv, PYTEST_TIMEOUT_S, env=ctx.env(**extra), cwd=repo)
    io.measure("pytest_rc", done.rc)
    io.measure("output_tail", procs.tail(done.stdout.strip(), 1500))
    if not junit.exists():
        io.error(f"pytest wrote no report: {done.why()}")
        return
    counts, cases = parse_junit(junit.read_text(encoding="utf-8"))
    io.measure("counts", counts)
    io.measure("tests", cases)
    for case in cases:
        if case["outcome"] in ("failed", "error"):
            io.error(f"{case['test']} {case['outcome']}: {case['message']}")
        elif case["outcome"] == "skipped":
            io.error(f"{case['test']} skipped on a GPU machine: {case['message']}")
    if counts["tests"] == 0:
        io.error("no GPU test ran")
    io.summary(
        f"{counts['passed']} passed, {counts['failed'] + counts['error']} failed, "
        f"{counts['skipped']} skipped of {counts['tests']}"
    )
