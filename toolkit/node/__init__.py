"""Code that runs on the nodes themselves, sent over the transport (stdlib only).

``agent.py`` is never imported by rtk: its text is fed to ``python -`` on a node.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from toolkit.errors import ClusterError
from toolkit.inventory import Node
from toolkit.transport.base import Transport


@cache
def agent_source() -> str:
    """The text of ``agent.py``."""
    return resources.files(__package__).joinpath("agent.py").read_text(encoding="utf-8")


def call_agent(transport: Transport, node: Node, command: str, timeout_s: float) -> dict[str, Any]:
    """Run an agent command line (from the plan) on ``node`` and return its JSON answer.

    Raises:
        ClusterError: The agent did not run, or reported an error.
        toolkit.errors.TransportError: The node could not be reached.
    """
    result = transport.run(node, command, stdin=agent_source(), timeout_s=timeout_s)
    answer: dict[str, Any] = {}
    lines = result.stdout.strip().splitlines()
    if lines:
        try:
            answer = json.loads(lines[-1])
        except json.JSONDecodeError:
            answer = {}
    if result.ok and "error" not in answer and answer:
        return answer
    reason = answer.get("error") or result.tail() or f"exit status {result.exit_code}"
    if result.exit_code == 127:
        reason = f"{node.python} not found on the node; set python or venv in the inventory"
    raise ClusterError(f"{node.name}: {reason}")
