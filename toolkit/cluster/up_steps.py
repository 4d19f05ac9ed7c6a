"""The steps ``rtk up`` takes, as data: the dry run prints them and the bring-up walks them.

``up_steps`` are the cluster's (credentials, the nodes, the wait with the checks beside
it, the state kept); ``node_steps`` each node's, in order. ``plan_text`` numbers and
describes both for ``--dry-run``; ``lifecycle.start`` and ``lifecycle.node_start``
record each step as they take it (``UpResult.ran``, ``NodeOutcome.ran``), so a test
holds what ran to what was printed.
"""

from __future__ import annotations

from enum import StrEnum

from toolkit.cluster.plan import ClusterPlan


class UpStep(StrEnum):
    """A step of the whole bring-up, in the order they run."""

    ROTATE = "rotate"  # a new token, CA and certificates (--rotate-credentials)
    NODES = "nodes"  # every node's steps: the head first, then the workers in waves
    WAIT = "wait"  # until the nodes are alive in Ray with their GPUs and resources
    PREFLIGHT = "preflight"  # the fast checks, beside the wait
    STATE = "state"  # what this machine keeps of the cluster (state.json)


class NodeStep(StrEnum):
    """A step on one node, in the order they run."""

    PROBE = "probe"
    PUT_BACK = "put back"  # GPU settings an earlier run left: when the probe finds them
    STOP_LEFTOVERS = "stop leftovers"  # of an earlier run: when the probe finds them
    TOKEN = "token"
    TLS = "tls"
    ENV = "env"
    START = "start"


# Taken only when the probe finds their cause; every other step after the probe is
# skipped when this cluster's Ray already runs on the node.
WHEN_FOUND = frozenset({NodeStep.PUT_BACK, NodeStep.STOP_LEFTOVERS})


def up_steps(rotate: bool, preflight: bool) -> tuple[UpStep, ...]:
    """The bring-up's steps: with ``rotate`` new credentials first; ``preflight`` the checks."""
    steps = [UpStep.ROTATE] if rotate else []
    steps += [UpStep.NODES, UpStep.WAIT]
    steps += [UpStep.PREFLIGHT] if preflight else []
    steps.append(UpStep.STATE)
    return tuple(steps)


def node_steps(plan: ClusterPlan) -> tuple[NodeStep, ...]:
    """The steps on each of ``plan``'s nodes: the probe, what it may find, the files, the start."""
    steps = [NodeStep.PROBE, NodeStep.PUT_BACK, NodeStep.STOP_LEFTOVERS]
    steps += [NodeStep.TOKEN] if plan.auth else []
    steps += [NodeStep.TLS] if plan.tls else []
    steps += [NodeStep.ENV, NodeStep.START]
    return tuple(steps)
