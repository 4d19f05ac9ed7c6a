"""rtk's node script for power limits and clocks (``toolkit/node/gpu_control.py``), run as rtk does.

rtk feeds the script to ``python -`` on each node, as sent (with ``common.py`` in front,
``toolkit.nodeinfo.script``); here the node is this machine, so the same line runs
locally and its one-line JSON answer is read back.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from gpu_acceptance import procs


def control(
    python: str,
    repo: Path,
    command: str,
    restore_file: Path | None = None,
    *,
    power_limit_w: float | None = None,
    gpu_clocks_mhz: tuple[int, int] | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Run ``gpu_control.py COMMAND``; its answer (``ok``, ``result``, ``error``) plus ``rc``."""
    argv = [python, "-", command, "--node", "acceptance"]
    if restore_file is not None:
        argv += ["--restore-file", str(restore_file)]
    if power_limit_w is not None:
        argv += ["--power-limit-w", f"{power_limit_w:g}"]
    if gpu_clocks_mhz is not None:
        argv += ["--gpu-clocks-mhz", f"{gpu_clocks_mhz[0]},{gpu_clocks_mhz[1]}"]
    from toolkit.nodeinfo.script import sent_source

    with tempfile.TemporaryFile("w+", encoding="utf-8") as script:
        script.write(sent_source("toolkit.node", "gpu_control.py"))
        script.seek(0)
        done = procs.run(argv, timeout_s, stdin=script)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "rc": done.rc, "error": done.why()}
    answer: dict[str, Any] = json.loads(lines[-1])
    answer["rc"] = done.rc
    return answer


def restore_if_pending(python: str, repo: Path, restore_file: Path) -> dict[str, Any] | None:
    """Put back what a restore file names, if one is there; None when there is none."""
    if not restore_file.exists():
        return None
    return control(python, repo, "restore", restore_file)


def settings(python: str, repo: Path) -> dict[str, dict[str, Any]]:
    """Every GPU's power limits and clocks, by UUID (``gpu_control.py read``).

    Raises:
        RuntimeError: The script failed.
    """
    answer = control(python, repo, "read")
    if not answer.get("ok"):
        raise RuntimeError(f"gpu_control.py read failed: {answer.get('error')}")
    gpus: dict[str, dict[str, Any]] = answer["result"]["gpus"]
    return gpus
