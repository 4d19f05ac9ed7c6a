"""Checks from what localisation found: one failed check per node or link blamed.

The bandwidth job's result has a ``localise`` section per test kind (``tcp``,
``allreduce``; a ``bandwidth.localise_section.LocaliseSection``). Each culprit
becomes a check ``net.localise.<kind>`` whose scope is the node's name, or ``a<->b``
for a link (either end may be the one to leave out). A node-scoped failed check is
what the list of nodes to exclude is built from, so a node culprit is always the
check's scope. A search that could not name anyone (the whole cluster alike, or bad
results that did not repeat) or stopped with an error is one warning for the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from toolkit.preflight.bandwidth.localise_section import LocaliseSection, ShownCulprit
from toolkit.preflight.result import Check

LINK = "<->"  # between a link's two ends in a scope: ``a<->b``
WHAT = {"tcp": "TCP throughput", "allreduce": "all-reduce busbw"}
LOOK_AT = {
    "tcp": "its NIC (ethtool, ip -s link), traffic shaping (tc) and load",
    "allreduce": "its NICs and GPUs (rtk env for the NCCL transport, nvidia-smi topo -m) and load",
}


def link_scope(a: str, b: str) -> str:
    """The scope of a check about the link between ``a`` and ``b``."""
    return f"{a}{LINK}{b}"


def localise_checks(section: Mapping[str, LocaliseSection]) -> list[Check]:
    """The checks of every test kind in the job's ``localise`` section."""
    checks = []
    for kind, found in section.items():
        checks += kind_checks(kind, found)
    return checks


def kind_checks(kind: str, found: LocaliseSection) -> list[Check]:
    """One test kind's checks: a failed one per culprit, or a warning when none is named."""
    name = f"net.localise.{kind}"
    what = WHAT.get(kind, kind)
    spent = f"{_count(found.rounds, 'round')}, {_count(found.probes, 'probe')}"
    if found.error is not None:
        return [
            Check(
                name,
                "cluster",
                "warn",
                f"localisation stopped: {found.error}",
                "the slow node or link named",
                "the measurements above stand; run again, or look at the failed pairs",
            )
        ]
    look_at = LOOK_AT.get(kind, "it")
    checks = [_culprit(name, what, look_at, c, spent) for c in found.culprits]
    conclusion = found.conclusion
    unresolved = found.unresolved
    if conclusion == "cluster-wide":
        suspects = len({n for g in unresolved for n in g})
        searched = "?" if found.node_count is None else found.node_count
        checks.append(
            Check(
                name,
                "cluster",
                "warn",
                f"no single culprit: {suspects} of {searched} nodes bad in "
                f"every group tried ({spent})",
                "one node or link to blame",
                f"{what} is low across the cluster: look at what the nodes share "
                "(switch, network settings) or at the expected value",
            )
        )
    elif conclusion == "flaky":
        groups = "; ".join(",".join(f.nodes) for f in found.flakes)
        checks.append(
            Check(
                name,
                "cluster",
                "warn",
                f"bad once, then good when measured again: {groups} ({spent})",
                "bad results repeat before anyone is blamed",
                "an intermittent problem: run preflight --bandwidth again",
            )
        )
    elif unresolved:
        shown = "; ".join(",".join(g) for g in unresolved[:4])
        checks.append(
            Check(
                name,
                "cluster",
                "warn",
                f"not narrowed further: {shown}" + (" and more" if len(unresolved) > 4 else ""),
                "one node or link to blame",
                "localise again without the nodes named",
            )
        )
    return checks


def _culprit(name: str, what: str, look_at: str, culprit: ShownCulprit, spent: str) -> Check:
    nodes = culprit.nodes
    summary = culprit.summary or "bad with known-good partners"
    if culprit.kind == "link" and len(nodes) == 2:
        return Check(
            name,
            link_scope(nodes[0], nodes[1]),
            "fail",
            f"{summary} (link; {spent})",
            f"{what} like the other pairs",
            f"the link between {nodes[0]} and {nodes[1]}: check the cable, ports and "
            f"switch path between them; or go on without one end: "
            f"rtk up --exclude {nodes[1]}",
        )
    node = nodes[0]
    return Check(
        name,
        node,
        "fail",
        f"{summary} ({spent})",
        f"{what} like the other nodes",
        f"{node} is slow with every partner: check {look_at}; "
        f"or go on without it: rtk up --exclude {node}",
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"
