"""``--on-stall restart-excluding``: take the suspect nodes out of the Ray cluster.

A node that answered but holds a stuck or stopped rank keeps that rank's resources, and
Ray Train would place the restarted worker group on it again: its Ray is stopped, as
``rtk down`` stops a node's (the node agent's ``stop``, run detached on the node so it
outlives the Ray worker that starts it). A node that did not answer is left to Ray,
which declares it dead when its health checks fail. Either way the node's worker dies,
Ray Train's controller ends the worker group and restarts it from the last checkpoint
on the nodes left (an elastic group: ``toolkit.train.job``'s ``num_workers`` range).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

import ray

from toolkit.node.agent import MARKER_VARIABLE
from toolkit.ray_fanout import ask_nodes, pinned
from toolkit.stall.records import StallRecord

STOP_GRACE_S = 5.0
ASK_TIMEOUT_S = 10.0


def suspect_nodes(record: StallRecord) -> list[str]:
    """The nodes a stall's suspects are on, most likely first, each once."""
    found: list[str] = []
    for suspect in record.suspects:
        if suspect.node not in found:
            found.append(suspect.node)
    return found


def why_not_exclude(
    excluded: Sequence[str], nodes: Sequence[str], head: str | None, min_nodes: int
) -> str | None:
    """Why excluding ``excluded`` cannot give a restart; None when it can.

    Args:
        excluded: The suspects' nodes (``suspect_nodes``).
        nodes: The cluster's nodes now (their names).
        head: The node the job's driver runs on.
        min_nodes: The fewest nodes the worker group may run on (0: no shrinking).
    """
    if not excluded:
        return "no suspect to exclude"
    if not min_nodes:
        return "no room to shrink (min_nodes)"
    if head in excluded:
        return f"the head {head} is a suspect, and the job runs there"
    left = [n for n in nodes if n not in excluded]
    if len(left) < min_nodes:
        # Ray Train would wait for a node that never comes, however long.
        return (
            f"{len(left)} node(s) would be left of {len(nodes)}, fewer than min_nodes {min_nodes}"
        )
    return None


@ray.remote(num_cpus=0)
def _stop_this_node(grace_s: float) -> str:
    """Start the node agent's ``stop`` of this node's Ray, detached; what was started."""
    cluster_dir = os.environ.get(MARKER_VARIABLE)
    if not cluster_dir:
        return f"no {MARKER_VARIABLE} here: not a node rtk up started"
    # Without the marker variable, or the stop would count itself among Ray's processes;
    # with this worker's import path, where rtk's source is (shipped or installed).
    env = {k: v for k, v in os.environ.items() if k != MARKER_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    subprocess.Popen(  # noqa: S603 - this Python, rtk's own node agent
        [sys.executable, "-m", "toolkit.node.agent", "stop", cluster_dir, f"{grace_s:g}"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return "stopping"


def exclude_nodes(
    names: Sequence[str], node_ids: Mapping[str, str], answered: Sequence[str]
) -> dict[str, str]:
    """Stop Ray on each of ``names`` that answered; what happens to each node, in words.

    Args:
        names: The nodes to exclude.
        node_ids: Node name -> Ray node id (``collect.ray_node_ids``).
        answered: The nodes that gave their evidence (the others are left to Ray).
    """
    outcome = {
        name: "did not answer: Ray drops it when its health checks fail"
        for name in names
        if name not in answered or name not in node_ids
    }
    asked = [n for n in names if n not in outcome]

    def submit(name: str) -> ray.ObjectRef[str]:
        return _stop_this_node.options(scheduling_strategy=pinned(node_ids[name])).remote(
            STOP_GRACE_S
        )

    for answer in ask_nodes(asked, submit, ASK_TIMEOUT_S, max(1, len(asked))):
        if answer.value is not None:
            outcome[answer.key] = "its Ray is being stopped"
        else:
            outcome[answer.key] = f"could not stop its Ray: {answer.error}"
    return {name: outcome[name] for name in names}
