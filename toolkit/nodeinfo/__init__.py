"""rtk's side of the node scripts (``toolkit/node/``): calling them and reading their answers.

``script.py`` (``NodeScript``) is the one way to run a node script: it sends the
script's text with ``python - ARGS`` and reads its JSON answer. What comes back is
read once into frozen records: the agent's probe (``probe.py``), preflight's facts
(``host_facts.py``, ``gpu_facts.py``, ``history_facts.py``), each malformed field an
error naming the node (``answer_errors.py``). ``reach_request.py`` is what preflight's facts
script is asked to connect to.
"""

from __future__ import annotations

from toolkit.inventory import Node
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.script import AGENT, FACTS, NodeScript
from toolkit.transport.base import Transport

__all__ = ["AGENT", "FACTS", "NodeScript", "agent_source", "call_agent"]


def agent_source() -> str:
    """The text the agent is sent as (``agent.py`` with ``common.py``)."""
    return AGENT.source()


def call_agent(transport: Transport, node: Node, command: str, timeout_s: float) -> JsonObject:
    """Run an agent command line (from the plan) on ``node`` and return its JSON answer.

    The answer is the agent's JSON, not yet read: the caller reads it into a record.

    Raises:
        ClusterError: The agent did not run, or reported an error.
        toolkit.errors.TransportError: The node could not be reached.
    """
    return AGENT.call(transport, node, command, timeout_s)
