"""What a node says of Ray's prerequisites and of a ``ray start`` that failed, as typed records.

The probe (``agent.py probe``) sends ``TempDirFacts`` and ``RayFacts`` before Ray starts;
``node/startdiag.py`` sends a ``StartDiagFacts`` after a start failed or a raylet did
not join. ``toolkit.lifecycle.failures.causes`` reads these into one line per node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.fields import Fields
from toolkit.inventory import Node
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.nodeinfo.script import NodeScript
from toolkit.transport.base import Transport

STARTDIAG = NodeScript("toolkit.node", "startdiag.py")
"""The node script that reads why Ray did not start (see ``startdiag.py``)."""

STARTDIAG_TIMEOUT_S = 30.0
WHAT = "start diagnosis"


@dataclass(frozen=True)
class TempDirFacts:
    """Ray's temp dir on a node.

    Attributes:
        path: The temp dir.
        exists: Whether it exists yet.
        mount_point: The mount it lies on (that of its nearest existing parent).
        fs_type: That mount's file system type (``ext4``, ``tmpfs``, ``nfs4``...).
        read_only: Whether that mount is read-only.
        free_bytes: Space free to this user there.
        write_error: Why a file could not be written there (None: it could, or was not tried).
        other_hosts: Other hosts that wrote their names into it: a temp dir shared by nodes.
    """

    path: str
    exists: bool = False
    mount_point: str | None = None
    fs_type: str | None = None
    read_only: bool | None = None
    free_bytes: int | None = None
    write_error: str | None = None
    other_hosts: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        """As the node sends it (``read`` reads it back)."""
        return {
            "path": self.path,
            "exists": self.exists,
            "mount_point": self.mount_point,
            "fs_type": self.fs_type,
            "read_only": self.read_only,
            "free_bytes": self.free_bytes,
            "write_error": self.write_error,
            "other_hosts": list(self.other_hosts),
        }

    @classmethod
    def read(cls, f: Fields) -> TempDirFacts:
        """From the ``temp_dir`` object of an answer."""
        return cls(
            path=f.text("path"),
            exists=f.flag("exists"),
            mount_point=f.text_or_none("mount_point"),
            fs_type=f.text_or_none("fs_type"),
            read_only=f.flag_or_none("read_only"),
            free_bytes=f.integer_or_none("free_bytes"),
            write_error=f.text_or_none("write_error"),
            other_hosts=f.texts("other_hosts"),
        )


@dataclass(frozen=True)
class RayFacts:
    """The node's Python and its Ray.

    Attributes:
        executable: The Python that answered (the inventory's ``python``).
        version: Its Ray's version (from the package's metadata), None without Ray.
        error: Why Ray could not be found.
    """

    executable: str
    version: str | None = None
    error: str | None = None

    def to_json(self) -> JsonObject:
        """As the node sends it (``read`` reads it back)."""
        return {"executable": self.executable, "version": self.version, "error": self.error}

    @classmethod
    def read(cls, f: Fields) -> RayFacts:
        """From the ``ray`` object of an answer."""
        return cls(f.text("executable"), f.text_or_none("version"), f.text_or_none("error"))


@dataclass(frozen=True)
class StartDiagFacts:
    """A node's answer to ``startdiag.py``.

    Attributes:
        node: The node's name in the inventory.
        hostname: Its host name.
        temp_dir: Ray's temp dir there.
        ray: Its Python's Ray.
        port_holders: Of its pinned ports, those another process listens on -> who.
        reach: Each head port tried -> None (reached) or why not.
        log_errors: Error lines of Ray's logs of the newest session (``FILE: line``).
        log_tails: Ray's log file -> its last lines.
    """

    node: str
    hostname: str
    temp_dir: TempDirFacts
    ray: RayFacts
    port_holders: Mapping[int, str] = field(default_factory=dict)
    reach: Mapping[int, str | None] = field(default_factory=dict)
    log_errors: tuple[str, ...] = ()
    log_tails: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, node: str, data: Any) -> StartDiagFacts:
        """Read ``startdiag.py``'s answer for ``node``.

        Raises:
            ClusterError: A field is missing or of the wrong type (named with the node).
        """
        f = answer_fields(node, WHAT, data)
        logs = f.nested("logs")
        tails = logs.obj("tails")
        reach = f.obj("reach")
        return cls(
            node=node,
            hostname=f.text("hostname"),
            temp_dir=TempDirFacts.read(f.nested("temp_dir")),
            ray=RayFacts.read(f.nested("ray")),
            port_holders={int(port): str(who) for port, who in f.text_map("ports").items()},
            reach={int(port): None if why is None else str(why) for port, why in reach.items()},
            log_errors=logs.texts("errors"),
            log_tails={
                name: tuple(str(line) for line in lines)
                for name, lines in tails.items()
                if isinstance(lines, list)
            },
        )


def read_start_diag(
    transport: Transport,
    node: Node,
    temp_dir: str,
    ports: tuple[int, ...],
    head_ip: str | None = None,
    head_ports: tuple[int, ...] = (),
) -> StartDiagFacts:
    """Run ``startdiag.py`` on ``node`` and read its answer.

    Raises:
        ClusterError: The script did not run or answered wrongly.
        toolkit.errors.TransportError: The node could not be reached.
    """
    args = [temp_dir, ",".join(map(str, ports))]
    if head_ip:
        args += [head_ip, ",".join(map(str, head_ports))]
    command = STARTDIAG.command(node, *args)
    answer = STARTDIAG.call(transport, node, command, STARTDIAG_TIMEOUT_S)
    return StartDiagFacts.from_json(node.name, answer)
