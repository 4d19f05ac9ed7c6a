"""One way to run rtk's node scripts: ``python - ARGS`` with the script's text on stdin.

A node script is a stdlib-only file of this package (or another, like
``toolkit/node/gpu_control.py``) that is never imported by rtk: its text is fed to the
node's own Python, which needs no rtk installed. It prints one JSON object as its
last line. ``NodeScript`` builds the command line, sends the text, reads the answer
and turns every kind of failure into one error that names the node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from toolkit.errors import ClusterError, RtkError
from toolkit.inventory import Node
from toolkit.shell import join, with_env_file
from toolkit.transport.base import CommandResult, Transport

# What the shell exits with when it cannot find the program (the node's Python).
NOT_FOUND_EXIT = 127


@cache
def script_source(package: str, file: str) -> str:
    """The text of ``file`` in ``package`` (read once)."""
    return resources.files(package).joinpath(file).read_text(encoding="utf-8")


@dataclass(frozen=True)
class NodeScript:
    """A script rtk runs on nodes, and how to read its answer.

    Attributes:
        package: The package that holds the file (``toolkit.node``).
        file: The file's name (``agent.py``).
        error: What a failure raises; its message starts with the node's name.
        ok_key: A field of the answer that must be true on success (``ok`` for
            ``control.py``); either way an answer with an ``error`` field fails.
    """

    package: str
    file: str
    error: type[RtkError] = ClusterError
    ok_key: str | None = None

    def source(self) -> str:
        """The script's text, fed to the node's Python on stdin."""
        return script_source(self.package, self.file)

    def command(self, node: Node, *args: str, env_file: str | None = None) -> str:
        """The command line that runs the script on ``node`` with ``args``.

        Args:
            node: Where it runs (its ``python``).
            *args: The script's arguments, quoted here.
            env_file: An env file to load first (Ray's variables for ``status``).
        """
        line = join([node.python, "-", *args])
        return with_env_file(env_file, line) if env_file else line

    def call(
        self, transport: Transport, node: Node, command: str, timeout_s: float
    ) -> dict[str, Any]:
        """Run ``command`` (from ``self.command``) on ``node``; the script's JSON answer.

        Raises:
            RtkError: ``self.error``: the script did not run, gave no answer, or
                reported an error.
            toolkit.errors.TransportError: The node could not be reached.
        """
        result = transport.run(node, command, stdin=self.source(), timeout_s=timeout_s)
        return self.answer(node, result)

    def answer(self, node: Node, result: CommandResult) -> dict[str, Any]:
        """The JSON object on the last line of ``result``'s stdout, if it says success.

        Raises:
            RtkError: ``self.error``, naming the node and why.
        """
        answer: dict[str, Any] = {}
        lines = result.stdout.strip().splitlines()
        if lines:
            try:
                parsed = json.loads(lines[-1])
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict):
                answer = parsed
        fine = self.ok_key is None or bool(answer.get(self.ok_key))
        if result.ok and answer and "error" not in answer and fine:
            return answer
        reason = answer.get("error") or result.tail() or f"exit status {result.exit_code}"
        if result.exit_code == NOT_FOUND_EXIT:
            reason = f"{node.python} not found on the node; set python or venv in the inventory"
        raise self.error(f"{node.name}: {reason}")


AGENT = NodeScript("toolkit.node", "agent.py")
"""The node agent: probe, stop, status, smoke, pack (see ``agent.py``)."""

FACTS = NodeScript("toolkit.node", "facts.py")
"""Preflight's facts of one node (see ``facts.py``)."""
