"""What the flows ask of every workload, and that they ask nothing else.

A new kind of workload is one module of ``toolkit.workloads``: this test's own kind,
defined here, runs through the flow's request and dry run as the built-in ones do.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from conftest import REPO

from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.flows import job_request
from toolkit.flows.driver_placement import gated
from toolkit.inventory import default_inventory
from toolkit.jobs.request import Driver, JobRequest
from toolkit.state.store import StateStore
from toolkit.workloads import Workload


@dataclass(frozen=True)
class EchoWorkload:
    """A fifth kind: ``echo`` on the head."""

    words: str
    run_dir: str | None = None

    @property
    def starts_ahead(self) -> bool:
        return False

    def check(self) -> None:
        pass

    def remember(self, store: StateStore) -> None:
        pass

    def job_request(self, plan: ClusterPlan, stamp: int, ship_code: bool) -> JobRequest:
        name = f"rtk-echo-{stamp}"
        return JobRequest("echo", f"echo {self.words}", {}, name, plan.dashboard_url)


def test_a_new_kind_of_workload_needs_no_change_in_the_flows() -> None:
    workload: Workload = EchoWorkload("hi")
    request = job_request(build_plan(default_inventory()), workload, now_s=3)
    assert request.render().startswith("echo job rtk-echo-3 via ")
    assert not gated(workload, JobRequest("echo", "", {}, "x", "", driver=Driver.LOCAL))


def test_no_flow_asks_which_kind_of_workload_it_holds() -> None:
    kinds = {"TrainWorkload", "CommandWorkload", "VllmWorkload", "TorchrunWorkload"}
    asked = []
    for path in sorted((REPO / "toolkit" / "flows").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance"):
                continue
            if kinds & {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
                asked.append(f"{path.name}:{node.lineno}")
    assert asked == [], f"flows switch on the workload's type at {asked}"
