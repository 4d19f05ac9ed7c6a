"""Which Ray ports preflight's ``facts.py`` connects to, sent inside the script's text.

The request rides on the script's stdin: ``facts.py``'s line ``PEERS_JSON = ""`` is
replaced with the request as a JSON text before the script is sent. Not on its command
line, which is bounded (the kernel's limit on one argument, and what sshd and the
shells on the way accept) while an all-pairs list at 1,000 nodes runs to tens of kB.
The form is compact: each port number once, each peer once with the index of its set
of port names, so it grows with the peers, not with peers x ports::

    {"ports": {"node_manager": 6380, ...},
     "groups": [["node_manager", "object_manager"], [..., "gcs", "dashboard"]],
     "peers": [["n0002", "10.0.0.2", 0], ["n0001", "10.0.0.1", 1]]}

``facts.py`` reads it with its own few stdlib lines (``targets``); a test holds the two
to the same answer.
"""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.json_types import JsonObject, JsonValue

__all__ = ["PLACEHOLDER", "PeerPorts", "ReachRequest", "request_in", "script_with"]

PLACEHOLDER = 'PEERS_JSON = ""\n'  # the line of facts.py the request replaces


@dataclass(frozen=True)
class PeerPorts:
    """One peer and the names of its Ray ports to connect to.

    Attributes:
        name: The peer's inventory name (the answer's keys are ``name:port-name``).
        address: Where to connect.
        ports: Port names, keys of the request's ``ports``.
    """

    name: str
    address: str
    ports: tuple[str, ...]


@dataclass(frozen=True)
class ReachRequest:
    """The ports one node connects to.

    Attributes:
        ports: Port name -> number (the inventory's, the same on every node).
        peers: The peers, each with its port names.
    """

    ports: Mapping[str, int]
    peers: tuple[PeerPorts, ...] = ()

    def targets(self) -> dict[str, tuple[str, int]]:
        """``name:port-name`` -> (address, port), as ``facts.py`` reads the request."""
        return {
            f"{p.name}:{port}": (p.address, int(self.ports[port]))
            for p in self.peers
            for port in p.ports
        }

    def to_json(self) -> JsonObject:
        """The compact form sent to the node."""
        groups: dict[tuple[str, ...], int] = {}
        rows: list[JsonValue] = [
            [p.name, p.address, groups.setdefault(p.ports, len(groups))] for p in self.peers
        ]
        ports: JsonObject = {name: port for name, port in self.ports.items()}
        return {"ports": ports, "groups": [[*g] for g in groups], "peers": rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReachRequest:
        """The inverse of ``to_json``.

        Raises:
            ValueError: ``data`` is not in that form.
        """
        try:
            groups = [tuple(str(p) for p in g) for g in data["groups"]]
            peers = tuple(
                PeerPorts(str(name), str(address), groups[int(group)])
                for name, address, group in data["peers"]
            )
            return cls({str(k): int(v) for k, v in data["ports"].items()}, peers)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"not a reach request: {e!r}") from e


def script_with(source: str, request: ReachRequest) -> str:
    """``facts.py``'s text (``source``) carrying ``request``.

    Raises:
        ValueError: ``source`` has no ``PLACEHOLDER`` line.
    """
    head, found, tail = source.partition(PLACEHOLDER)
    if not found:
        raise ValueError(f"the facts script has no line {PLACEHOLDER.strip()!r}")
    text = json.dumps(request.to_json(), separators=(",", ":"))
    return f"{head}PEERS_JSON = {text!r}\n{tail}"


_PARSING = threading.Lock()


def request_in(source: str, text: str) -> ReachRequest | None:
    """The request ``text`` carries if it is ``source`` made by ``script_with``, else None."""
    head, found, tail = source.partition(PLACEHOLDER)
    if not found or not text.startswith(head) or not text.endswith(tail):
        return None
    line = text[len(head) : len(text) - len(tail)].strip()
    name, _, literal = line.partition(" = ")
    if name != "PEERS_JSON":
        return None
    with _PARSING:  # ast is not thread-safe in CPython 3.11 before 3.11.5 (gh-106905)
        value = ast.literal_eval(literal)
    if not isinstance(value, str):
        return None
    return ReachRequest.from_json(json.loads(value)) if value else ReachRequest({})
