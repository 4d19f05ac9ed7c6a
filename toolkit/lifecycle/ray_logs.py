"""Every node's Ray logs and rtk's node files, brought here for a bug report.

The same path as a run's results (``toolkit.telemetry.fetch``): a node script
(``toolkit/node/logpack.py``) packs a node's files into an archive in the cluster's
temp dir, streaming and bounded (a byte cap per node, newest files first, the
token never taken and masked wherever it appears); rtk copies it here in pieces
over the transport, removes it on the node, and unpacks it into one folder per
node, or adds it to one tarball. ``fanout.parallel`` nodes at a time; a node that
fails is kept apart with its reason, the others are collected all the same.
"""

from __future__ import annotations

import contextlib
import io
import json
import posixpath
import re
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.errors import ClusterError, RtkError, TransportError
from toolkit.json_types import JsonObject
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.nodeinfo.script import NodeScript
from toolkit.shell import join
from toolkit.telemetry.fetch import unpack
from toolkit.transport.base import Transport
from toolkit.transport.group import run_each

LOGPACK = NodeScript("toolkit.node", "logpack.py")
"""The node script that packs a node's logs (see ``logpack.py``)."""

MAX_BYTES_PER_NODE = 64 << 20
PACK_TIMEOUT_S = 600.0
TARBALL_SUFFIXES = (".tar.gz", ".tgz")
SUMMARY_FILE = "summary.json"
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class NodeLogs:
    """What one node gave: files taken (their bytes), cut, and left out."""

    node: str
    files: int
    file_bytes: int
    archive_bytes: int
    left_out: int = 0
    left_out_bytes: int = 0
    cut: tuple[str, ...] = ()
    masked_files: int = 0

    @classmethod
    def from_answer(cls, node: str, answer: Mapping[str, Any]) -> NodeLogs:
        """From ``logpack.py``'s JSON answer.

        Raises:
            ClusterError: A field is missing or of the wrong type (naming the node).
        """
        fields = answer_fields(node, "log packer answer", answer)
        return cls(
            node=node,
            files=fields.integer("files"),
            file_bytes=fields.integer("file_bytes"),
            archive_bytes=fields.integer("size_bytes"),
            left_out=fields.integer("left_out"),
            left_out_bytes=fields.integer("left_out_bytes"),
            cut=fields.texts("cut"),
            masked_files=fields.integer("masked_files"),
        )

    def to_json(self) -> JsonObject:
        """A JSON-ready dict."""
        return {
            "files": self.files,
            "file_bytes": self.file_bytes,
            "archive_bytes": self.archive_bytes,
            "left_out": self.left_out,
            "left_out_bytes": self.left_out_bytes,
            "cut": list(self.cut),
            "masked_files": self.masked_files,
        }


@dataclass(frozen=True)
class LogsCollection:
    """Where the logs went, and per node what came or why nothing did."""

    out: Path
    tarball: bool
    max_bytes_per_node: int
    nodes: Mapping[str, NodeLogs] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def file_bytes(self) -> int:
        """Bytes of the files collected, over every node."""
        return sum(n.file_bytes for n in self.nodes.values())

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (also the collection's ``summary.json``)."""
        return {
            "out": str(self.out),
            "tarball": self.tarball,
            "max_bytes_per_node": self.max_bytes_per_node,
            "file_bytes": self.file_bytes,
            "nodes": {name: logs.to_json() for name, logs in self.nodes.items()},
            "errors": dict(self.errors),
        }


def parse_duration_s(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h`` or ``1d`` in seconds.

    Raises:
        ValueError: Anything else (the message says what is accepted).
    """
    match = _DURATION.fullmatch(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r}: give a duration like 90s, 30m, 2h or 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def default_destination(cluster: str, now_s: float | None = None) -> Path:
    """``./rtk-logs-CLUSTER-YYYYmmdd-HHMMSS``: a new folder here."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now_s))
    return Path(f"rtk-logs-{cluster}-{stamp}")


def is_tarball(out: Path) -> bool:
    """True when ``out`` names a tarball rather than a folder."""
    return out.name.endswith(TARBALL_SUFFIXES)


def collect_ray_logs(
    plan: ClusterPlan,
    transport: Transport,
    out: Path,
    max_bytes_per_node: int = MAX_BYTES_PER_NODE,
    since_s: float | None = None,
) -> LogsCollection:
    """Collect every node's logs into ``out``: a folder per node, or one tarball.

    Args:
        plan: The cluster (its temp dir on the nodes, its ``fanout.parallel``).
        transport: Reaches the nodes.
        out: A new folder, or a file ending in ``.tar.gz``/``.tgz``.
        max_bytes_per_node: A node's cap on file bytes; newest files first.
        since_s: Only files modified in the last ``since_s`` seconds (None: any).

    Raises:
        RtkError: ``out`` exists already (a folder that is not empty, or a file).
    """
    tarball = is_tarball(out)
    if out.exists() and (tarball or not out.is_dir() or any(out.iterdir())):
        raise RtkError(f"{out} exists already; give a new --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    sink = _TarSink(out) if tarball else _FolderSink(out)
    try:

        def one(node_plan: NodePlan) -> NodeLogs:
            archive = staging / f"{uuid.uuid4().hex}.tar.gz"
            try:
                logs = _fetch_node(plan, transport, node_plan, archive, max_bytes_per_node, since_s)
                sink.add(node_plan.name, archive)
            finally:
                archive.unlink(missing_ok=True)
            return logs

        group = run_each(plan.nodes, one, parallel=plan.inventory.fanout.parallel)
        collection = LogsCollection(
            out,
            tarball,
            max_bytes_per_node,
            {n.name: group.results[n.name] for n in plan.nodes if n.name in group.results},
            {name: _cause(error) for name, error in group.errors.items()},
        )
        sink.close(json.dumps(collection.to_json(), indent=2).encode())
    except BaseException:
        sink.abort()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return collection


def _fetch_node(
    plan: ClusterPlan,
    transport: Transport,
    node_plan: NodePlan,
    archive: Path,
    max_bytes: int,
    since_s: float | None,
) -> NodeLogs:
    """Pack the node's logs there, copy the archive to ``archive``, remove it there."""
    node = node_plan.node
    remote = posixpath.join(plan.paths.temp_dir, f"rtk-logs-{uuid.uuid4().hex[:12]}.tar.gz")
    args = (plan.paths.temp_dir, remote, str(max_bytes), f"{since_s or 0:g}")
    try:
        answer = LOGPACK.call(transport, node, LOGPACK.command(node, *args), PACK_TIMEOUT_S)
        transport.get(node, remote, archive)
    finally:
        with contextlib.suppress(TransportError):  # the temp dir goes with rtk down anyway
            transport.run(node, f"rm -f {join([remote])}", timeout_s=30.0)
    return NodeLogs.from_answer(node_plan.name, answer)


def _cause(error: BaseException) -> str:
    """A node's failure as one line (rtk's own errors name the node already)."""
    if isinstance(error, RtkError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _folder_name(node: str) -> str:
    """A node's name as a folder name here."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", node).lstrip(".") or "node"


class _FolderSink:
    """Unpacks each node's archive into ``out/NODE`` (nodes in parallel)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)

    def add(self, node: str, archive: Path) -> None:
        try:
            unpack(archive, self.out / _folder_name(node))
        except (ValueError, tarfile.TarError, OSError) as e:
            raise ClusterError(f"{node}: could not unpack its logs: {e}") from e

    def close(self, summary: bytes) -> None:
        (self.out / SUMMARY_FILE).write_bytes(summary)

    def abort(self) -> None:
        """Leave what was collected: a partial collection is still worth reading."""


class _TarSink:
    """Adds each node's archive, member by member, to one tarball under ``NODE/``.

    Nodes are copied and packed in parallel; one at a time is written here (a lock).
    The tarball is written as ``out.part`` and renamed when complete.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.partial = out.with_name(out.name + ".part")
        # Closed by close() or abort(): the tarball outlives this call.
        self.tar = tarfile.open(self.partial, mode="w:gz", compresslevel=6)  # noqa: SIM115
        self.lock = threading.Lock()

    def add(self, node: str, archive: Path) -> None:
        prefix = PurePosixPath(_folder_name(node))
        try:
            with tarfile.open(archive, mode="r:gz") as source, self.lock:
                for member in source:
                    name = PurePosixPath(member.name)
                    if name.is_absolute() or ".." in name.parts or not member.isfile():
                        raise ValueError(f"refusing {member.name!r}: not a plain file")
                    data = source.extractfile(member)
                    if data is None:
                        raise ValueError(f"refusing {member.name!r}: unreadable")
                    member.name = str(prefix / name)
                    with data:
                        self.tar.addfile(member, data)
        except (ValueError, tarfile.TarError, OSError) as e:
            raise ClusterError(f"{node}: could not add its logs to {self.out}: {e}") from e

    def close(self, summary: bytes) -> None:
        info = tarfile.TarInfo(SUMMARY_FILE)
        info.size, info.mtime, info.mode = len(summary), int(time.time()), 0o644
        with self.lock:
            self.tar.addfile(info, io.BytesIO(summary))
            self.tar.close()
        self.partial.replace(self.out)

    def abort(self) -> None:
        with self.lock:
            self.tar.close()
        self.partial.unlink(missing_ok=True)
