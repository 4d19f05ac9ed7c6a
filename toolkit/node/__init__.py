"""Code that runs on the nodes themselves, sent over the transport (stdlib only).

``agent.py`` and ``facts.py`` are never imported by rtk: their text is fed to
``python -`` on a node by ``NodeScript`` (``script.py``), rtk's one way to call them.
"""

from __future__ import annotations

from typing import Any

from toolkit.inventory import Node
from toolkit.node.script import AGENT, FACTS, NodeScript
from toolkit.transport.base import Transport

__all__ = ["AGENT", "FACTS", "NodeScript", "agent_source", "call_agent"]


def agent_source() -> str:
    """The text of ``agent.py``."""
    return AGENT.source()


def call_agent(transport: Transport, node: Node, command: str, timeout_s: float) -> dict[str, Any]:
    """Run an agent command line (from the plan) on ``node`` and return its JSON answer.

    Raises:
        ClusterError: The agent did not run, or reported an error.
        toolkit.errors.TransportError: The node could not be reached.
    """
    return AGENT.call(transport, node, command, timeout_s)
