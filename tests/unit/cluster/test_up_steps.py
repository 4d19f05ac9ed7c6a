"""``rtk up``'s steps: printed by ``--dry-run`` and taken by the bring-up, the same ones.

The dry run's numbered steps (the cluster's in the header, each node's in its block)
are read back from the text and held to the steps a bring-up of a simulated cluster
recorded (``UpResult.ran``, ``NodeOutcome.ran``): a step taken but not printed, or
printed and skipped, or out of order, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from toolkit.cluster.progress_reporter import QuietReporter
from toolkit.cluster.up_steps import WHEN_FOUND, NodeStep, UpStep, up_steps
from toolkit.flows import PreflightPolicy, Session
from toolkit.inventory import Inventory, load_inventory
from toolkit.simulation import Faults, LatencyModel, SimulatedCluster, SimulatedTransport
from toolkit.state.store import StateStore

NAMES = [f"n{i}" for i in range(1, 7)]
HEADER_STEP = re.compile(r"^  (?:steps)?\s+\d+\. ([a-z ]+): ")
NODE_STEP = re.compile(r"^  \d+\. ([a-z ]+?)(?: the container)?:(?: |$)")


def _inventory(tmp_path: Path, tls: bool = False) -> Inventory:
    data = {
        "cluster": "steps",
        "nodes": [{"host": n, "address": f"10.0.0.{i + 1}"} for i, n in enumerate(NAMES)],
        "ray": {"wait_timeout_s": 20, "tls": tls},
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path)


def _session(inv: Inventory, tmp_path: Path, cluster: SimulatedCluster) -> Session:
    return Session(
        inv,
        QuietReporter(),
        store=StateStore(inv.name, root=tmp_path / "state"),
        excluded=(),
        transport_factory=lambda _: SimulatedTransport(cluster),
    )


def printed_steps(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """The dry run's cluster steps, and each node's (a block's steps go to its nodes)."""
    cluster: list[str] = []
    nodes: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if match := HEADER_STEP.match(line):
            cluster.append(match.group(1))
        elif line.startswith("block "):
            # "block 1: head n1", "block 2: 5 workers n[2-6]; <name>, ...: each node's own"
            hosts = line.split(":", 1)[1].split(";")[0].split()[-1]
            current = []
            for name in _names(hosts):
                nodes[name] = current
        elif match := NODE_STEP.match(line):
            current.append(match.group(1))
    return cluster, nodes


def _names(hostlist: str) -> list[str]:
    """``n[2-6]`` or ``n1`` as names (the plan's host lists)."""
    found = re.fullmatch(r"(\w+?)\[(\d+)-(\d+)\]", hostlist)
    if found is None:
        return [hostlist]
    prefix, first, last = found.group(1), int(found.group(2)), int(found.group(3))
    return [f"{prefix}{i}" for i in range(first, last + 1)]


def taken_as_printed(printed: list[str], ran: list[NodeStep], running: bool) -> bool:
    """Whether a node's steps follow its printed ones.

    In the printed order; each taken unless it is taken only when the probe finds its
    cause (``WHEN_FOUND``), or unless the node already ran this cluster's Ray (then
    the probe alone).
    """
    taken = [str(s) for s in ran]
    if running:
        return taken == [str(NodeStep.PROBE)]
    needed = [s for s in printed if NodeStep(s) not in WHEN_FOUND]
    positions = [printed.index(s) for s in taken if s in printed]
    return (
        [s for s in taken if NodeStep(s) not in WHEN_FOUND] == needed
        and len(positions) == len(taken)
        and positions == sorted(positions)
    )


@pytest.mark.parametrize("tls", [False, True])
def test_the_steps_printed_are_the_steps_taken(tmp_path: Path, tls: bool) -> None:
    left = frozenset({"n3"})  # an earlier run's GPU settings are there to put back
    cluster = SimulatedCluster(LatencyModel(scale=0.001), Faults(gpu_settings_left=left))
    inv = _inventory(tmp_path, tls)
    with _session(inv, tmp_path, cluster) as session:
        text = session.up_plan(preflight=PreflightPolicy.ENFORCE)
        up = session.bring_up(PreflightPolicy.ENFORCE).up
    cluster_steps, node_printed = printed_steps(text)
    assert cluster_steps == ["nodes", "wait", "preflight", "state"]
    assert [str(s) for s in up.ran] == cluster_steps
    assert sorted(node_printed) == NAMES
    for outcome in up.nodes:
        assert taken_as_printed(node_printed[outcome.name], outcome.ran, False), outcome
    by_name = {o.name: o for o in up.nodes}
    assert NodeStep.PUT_BACK in by_name["n3"].ran and NodeStep.PUT_BACK not in by_name["n4"].ran
    assert (NodeStep.TLS in by_name["n1"].ran) is tls
    # Again, with Ray running everywhere: each node is probed and left as it is, and
    # the dry run without the checks has no preflight step.
    with _session(inv, tmp_path, cluster) as session:
        text = session.up_plan()
        again = session.bring_up(PreflightPolicy.SKIP).up
    cluster_steps, node_printed = printed_steps(text)
    assert [str(s) for s in again.ran] == cluster_steps == ["nodes", "wait", "state"]
    for outcome in again.nodes:
        assert taken_as_printed(node_printed[outcome.name], outcome.ran, True), outcome


def test_the_check_refuses_a_step_out_of_order_missing_or_not_printed() -> None:
    printed = ["probe", "put back", "stop leftovers", "token", "env", "start"]
    steps = NodeStep
    assert taken_as_printed(printed, [steps.PROBE, steps.TOKEN, steps.ENV, steps.START], False)
    assert not taken_as_printed(printed, [steps.PROBE, steps.ENV, steps.TOKEN, steps.START], False)
    assert not taken_as_printed(printed, [steps.PROBE, steps.TOKEN, steps.START], False)
    assert not taken_as_printed(
        printed, [steps.PROBE, steps.TOKEN, steps.TLS, steps.ENV, steps.START], False
    )


def test_new_credentials_come_before_every_other_step() -> None:
    assert up_steps(rotate=True, preflight=False) == (
        UpStep.ROTATE,
        UpStep.NODES,
        UpStep.WAIT,
        UpStep.STATE,
    )
