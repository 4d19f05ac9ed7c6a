"""Pieces the benchmarks share."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from toolkit.cluster.plan import NodePlan
from toolkit.shell import join


def bare_ray_start(node_plan: NodePlan, temp_dir: str, node_ip: str) -> str:
    """The plan's own `ray start` line without rtk: no env file, no token, the node IP given.

    The processes carry RTK_CLUSTER_DIR=temp_dir so rtk's node agent can stop them.
    """
    words = [
        f"--temp-dir={temp_dir}" if w.startswith("--temp-dir=") else w for w in node_plan.start_argv
    ]
    env = ["env", "RAY_AUTH_MODE=disabled", f"RTK_CLUSTER_DIR={temp_dir}"]
    return join([*env, *words, f"--node-ip-address={node_ip}"])


REPO = Path(__file__).resolve().parents[1]
# What an earlier implementation needs to run: its package and the data it reads.
SOURCE_PATHS = ("toolkit", "templates", "sbatch")
# The last commit before traces became Arrow: the previous sampler and report.
JSON_LINES_REF = "d694b6c"


def baseline_root(ref: str, into: Path) -> Path:
    """``toolkit/`` (and the data it reads) as of ``ref``, extracted under ``into``."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", ref, *SOURCE_PATHS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, *listed],
        capture_output=True,
        check=True,
    ).stdout
    root = into / f"baseline-{ref}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        # This repository's own archive; the filter exists from Python 3.11.4 on.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, filter="data")
        else:
            tar.extractall(root)  # noqa: S202
    return root
