"""A transport that answers from a script: failure paths of the executor without nodes.

Like Fabric's scripted sessions: each rule answers the commands on one node (or every
node, ``"*"``) whose text matches a regular expression; the rule added last wins, so a
test sets what every node does, then what one node does differently. Every call is
recorded (``calls``), and what ``put`` writes is kept (``files``). A command no rule
answers fails the test, naming it: nothing runs unscripted.

    transport = ScriptedTransport()
    transport.on("*", r" - probe ", answer({"route": {...}}))
    transport.on("n2", r"ray start", Reply(exit_code=1, stderr="address in use"))
    transport.on("n3", r"ray start", Reply(timeout=True))
    transport.fail_put("n4", r"node\\.env$", "disk full")
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import TransportError
from toolkit.inventory import Node
from toolkit.transport.base import CommandResult, Transport


@dataclass(frozen=True)
class Reply:
    """What a scripted command does: exit with output, fail to reach, or time out."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    unreachable: str | None = None  # raise TransportError with this reason
    timeout: bool = False  # raise TransportError as the real transports do at timeout_s


def answer(data: Mapping[str, Any], exit_code: int = 0) -> Reply:
    """A node script's reply: ``data`` as its one JSON line."""
    return Reply(exit_code=exit_code, stdout=json.dumps(dict(data)) + "\n")


@dataclass(frozen=True)
class Call:
    """One call the transport received."""

    node: str
    kind: str  # run | start_daemon | put | get
    command: str  # the command, or the path for put
    stdin: str | None = None
    timeout_s: float | None = None
    data: bytes | None = None


Responder = Reply | Mapping[str, Any] | Callable[[Call], Reply]


@dataclass(frozen=True)
class _Rule:
    node: str
    pattern: re.Pattern[str]
    respond: Responder


class ScriptedTransport(Transport):
    """Answers each command from the rules; records every call (thread-safe)."""

    name = "scripted"

    def __init__(self, *, daemons_in_foreground: bool = False) -> None:
        self.daemons_in_foreground = daemons_in_foreground
        self.calls: list[Call] = []
        self.files: dict[tuple[str, str], bytes] = {}
        self._rules: list[_Rule] = []
        self._put_failures: list[tuple[str, re.Pattern[str], str]] = []
        self._lock = threading.Lock()

    def on(self, node: str, pattern: str, respond: Responder) -> ScriptedTransport:
        """Answer commands on ``node`` (a glob: ``*``, ``n[23]``) that match ``pattern``.

        ``respond`` is a ``Reply``, a mapping (a node script's JSON answer, exit 0), or
        a function of the ``Call`` returning a ``Reply`` (for answers that depend on
        what happened before, such as Ray's status after some nodes started).
        """
        self._rules.append(_Rule(node, re.compile(pattern), respond))
        return self

    def fail_put(self, node: str, path_pattern: str, reason: str) -> ScriptedTransport:
        """Make ``put`` of a matching path on ``node`` raise ``TransportError``."""
        self._put_failures.append((node, re.compile(path_pattern), reason))
        return self

    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        """Answer ``command`` from the last rule that matches (see ``Transport.run``)."""
        return self._answer(Call(node.name, "run", command, stdin, timeout_s))

    def start_daemon(
        self,
        node: Node,
        command: str,
        ready_text: str,
        timeout_s: float,
        *,
        step_options: Sequence[str] = (),
    ) -> CommandResult:
        """Answer like ``run``, recorded as ``start_daemon`` (srun's options before it)."""
        shown = " ".join([*step_options, command])
        return self._answer(Call(node.name, "start_daemon", shown, None, timeout_s))

    def put(self, node: Node, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Keep the file in ``files``, or fail as scripted with ``fail_put``."""
        self._record(Call(node.name, "put", path, data=data))
        for pattern_node, pattern, reason in reversed(self._put_failures):
            if fnmatch.fnmatchcase(node.name, pattern_node) and pattern.search(path):
                raise TransportError(f"{node.name}: cannot write {path}: {reason}")
        with self._lock:
            self.files[(node.name, path)] = data

    def get(self, node: Node, path: str, local: Path) -> int:
        """Copy a file kept in ``files`` (put there by the test or a ``put``) to ``local``."""
        self._record(Call(node.name, "get", path))
        with self._lock:
            data = self.files.get((node.name, path))
        if data is None:
            raise TransportError(f"{node.name}: cannot copy {path}: no such file")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        return len(data)

    def commands(self, node: str | None = None, pattern: str = "") -> list[str]:
        """The commands run (or started) so far, on ``node`` if given, matching ``pattern``."""
        found = re.compile(pattern)
        with self._lock:
            calls = list(self.calls)
        return [
            c.command
            for c in calls
            if c.kind != "put" and (node is None or c.node == node) and found.search(c.command)
        ]

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _answer(self, call: Call) -> CommandResult:
        self._record(call)
        rule = next(
            (
                r
                for r in reversed(self._rules)
                if fnmatch.fnmatchcase(call.node, r.node) and r.pattern.search(call.command)
            ),
            None,
        )
        if rule is None:
            raise AssertionError(f"unscripted command on {call.node}: {call.command}")
        respond = rule.respond
        if isinstance(respond, Reply):
            reply = respond
        elif isinstance(respond, Mapping):
            reply = answer(respond)
        else:
            reply = respond(call)
        if reply.unreachable is not None:
            raise TransportError(f"{call.node}: {reply.unreachable}")
        if reply.timeout:
            raise TransportError(
                f"{call.node}: command ran past its {call.timeout_s:g} s limit: {call.command[:200]}"
            )
        return CommandResult(
            call.node, call.command, reply.exit_code, reply.stdout, reply.stderr, 0.0
        )


def startdiag_pattern(temp_dir: str) -> str:
    """``startdiag.py``'s command line: ``python3 - TEMP_DIR PORTS [HEAD_IP HEAD_PORTS]``."""
    return rf" - {re.escape(temp_dir)} [\d,]+( \S+ [\d,]+)?$"


def startdiag_answer(
    holders: Mapping[str, str] | None = None,
    reach: Mapping[str, str | None] | None = None,
    log_errors: tuple[str, ...] = (),
    ray_version: str | None = "2.60.0",
) -> Reply:
    """What ``startdiag.py`` says of a node whose temp dir is fine (and its Ray, by default)."""
    return answer(
        {
            "hostname": "host",
            "temp_dir": {
                "path": "/tmp/rtk",
                "exists": True,
                "mount_point": "/",
                "fs_type": "ext4",
                "read_only": False,
                "free_bytes": 10 << 30,
                "write_error": None,
                "other_hosts": [],
            },
            "ray": {
                "executable": "/usr/bin/python3",
                "version": ray_version,
                "error": None if ray_version else "No module named 'ray'",
            },
            "ports": dict(holders or {}),
            "reach": dict(reach or {}),
            "logs": {"session": None, "tails": {}, "errors": list(log_errors)},
        }
    )
