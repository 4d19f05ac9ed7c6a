"""``rtk torchrun``: torchrun on every node (``toolkit.torchrun``) under telemetry, as a Ray job."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field

from toolkit.cluster.plan import ClusterPlan
from toolkit.inventory.hostrange import fit_hostlist
from toolkit.jobs.request import JobRequest
from toolkit.telemetry.options import TelemetryOptions
from toolkit.torchrun.spec import TorchrunSpec, node_argv, nproc_for
from toolkit.workloads.base import Unremembered
from toolkit.workloads.user_command import CommandWorkload, recorded_request

TORCHRUN_MODULE = "toolkit.torchrun.fanout"


@dataclass(frozen=True)
class TorchrunWorkload(Unremembered):
    """The user's script under torchrun on every node, with rtk's telemetry."""

    spec: TorchrunSpec
    run_dir: str
    working_dir: str = "."
    telemetry: TelemetryOptions = field(default_factory=TelemetryOptions)

    def check(self) -> None:
        """Its telemetry options (the spec was checked when it was built)."""
        self.telemetry.check()

    def job_request(self, plan: ClusterPlan, stamp: int, ship_code: bool) -> JobRequest:
        """``toolkit.torchrun.fanout`` on the head, recorded, with what each node runs."""
        argv = [plan.head.node.python, "-m", TORCHRUN_MODULE, json.dumps(self.spec.to_json())]
        # Every rank's every line, as torchrun prints them: Ray's log deduplication (read
        # when the driver imports Ray) folds lines that differ only in numbers into one.
        env = {"RAY_DEDUP_LOGS": "0"}
        command = CommandWorkload(tuple(argv), self.working_dir, env, self.run_dir, self.telemetry)
        request = recorded_request(plan, command, "torchrun", stamp, ship_code)
        return dataclasses.replace(
            request,
            submission_id=request.submission_id.replace("rtk-record-", "rtk-torchrun-", 1),
            notes=tuple(torchrun_lines(plan, self.spec)),
        )


def torchrun_lines(plan: ClusterPlan, spec: TorchrunSpec) -> list[str]:
    """What each node runs, one line per distinct command (``--dry-run``).

    The rendezvous address is the head's as the inventory gives it; the job uses the
    address Ray knows the head by.
    """
    nodes = [n.node for n in plan.nodes]
    by_command: dict[str, list[str]] = {}
    for index, node in enumerate(nodes):
        nproc = nproc_for(spec, node.gpus)
        argv = node_argv(spec, len(nodes), plan.head.node.address, nproc, is_host=index == 0)
        by_command.setdefault(shlex.join([node.python, *argv]), []).append(node.name)
    lines = ["torchrun on every node, started together by the job:"]
    for command, names in by_command.items():
        lines.append(f"  {fit_hostlist(names, 60)} ({len(names)}): {command}")
    if spec.env:
        lines.append("  with " + " ".join(f"{k}={v}" for k, v in spec.env.items()))
    return lines
