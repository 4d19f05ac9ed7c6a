"""What a session would run, as printable requests (pure).

``job_request`` asks a workload (``toolkit.workloads``) for its ``JobRequest``: the
entrypoint, runtime environment and submission id of the Ray job, computed without
touching anything. ``--dry-run`` prints it; ``Session.run_workload`` submits it.
``ExecRequest`` is the same for ``rtk exec``: one shell command on every node, no job.
``stall_check_request`` is ``rtk stall-check``'s job, which runs no workload: it looks
at one that runs.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from toolkit.cluster.plan import ClusterPlan
from toolkit.jobs.request import JobRequest
from toolkit.jobs.shipped_code import code_env
from toolkit.stall.settings import CHECK_MODULE, CheckOptions
from toolkit.workloads import Workload


@dataclass(frozen=True)
class ExecRequest:
    """One shell command on every node (``rtk exec``), as it would run."""

    cluster: str
    transport: str
    nodes: tuple[str, ...]
    command: str
    timeout_s: float
    in_containers: tuple[str, ...] = ()  # ``[hosts] docker exec ...``, nodes with one

    def render(self) -> str:
        """The request as text (``--dry-run``)."""
        text = (
            f"cluster {self.cluster!r}: on {len(self.nodes)} node(s) over {self.transport} "
            f"({', '.join(self.nodes)}), at most {self.timeout_s:g} s each:\n"
            f"  {self.command}\n"
        )
        if self.in_containers:
            text += "inside the node's container, on the nodes that have one:\n"
            text += "".join(f"  {line}\n" for line in self.in_containers)
        return text


def job_request(
    plan: ClusterPlan, workload: Workload, now_s: float | None = None, ship_code: bool = True
) -> JobRequest:
    """The Ray job that runs ``workload`` on ``plan``'s cluster (pure).

    ``ship_code`` False: the nodes import the same rtk as this machine, and the job
    carries none (``toolkit.jobs.shipped_code``).
    """
    stamp = int(time.time() if now_s is None else now_s)
    return workload.job_request(plan, stamp, ship_code)


def stall_check_request(
    plan: ClusterPlan, options: CheckOptions, now_s: float | None = None, ship_code: bool = True
) -> JobRequest:
    """The Ray job of ``rtk stall-check``: ``toolkit.stall.check_job`` on the head (pure).

    ``ship_code`` as in ``job_request``.
    """
    stamp = int(time.time() if now_s is None else now_s)
    argv = [plan.head.node.python, "-m", CHECK_MODULE, json.dumps(options.to_json())]
    name = f"rtk-stall-check-{Path(options.run_dir).name or 'run'}-{stamp}"
    return JobRequest(
        "stall-check",
        shlex.join(argv),
        code_env(ship_code),
        name,
        plan.dashboard_url,
        options.run_dir,
    )
