"""A node's error history as ``facts.py`` sends it, raw, as typed records (read on the host).

The node sends text, bounded: the kernel log's XID lines, ``dcgmi diag``'s JSON and
the RDMA ports' sysfs files. The parsers and graders live in ``toolkit.preflight.history``
(``errlog``, ``dcgm``, ``ib_ports``, ``grade``); these records only carry the text
across, checked for type like every other field of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.fields import Fields
from toolkit.json_types import JsonObject


@dataclass(frozen=True)
class KernelLogFacts:
    """The kernel log's NVIDIA XID lines, as the node read them.

    Attributes:
        source: ``journalctl`` or ``dmesg``; None: neither could be read.
        xid_lines: The last XID lines (capped on the node), oldest first.
        xid_lines_total: How many XID lines there were before the cap.
        error: Why neither source could be read (what each answered).
    """

    source: str | None = None
    xid_lines: tuple[str, ...] = ()
    xid_lines_total: int = 0
    error: str | None = None

    @property
    def truncated(self) -> bool:
        """More XID lines were logged than the node sent."""
        return self.xid_lines_total > len(self.xid_lines)

    @classmethod
    def read(cls, f: Fields) -> KernelLogFacts:
        """Read the ``kernel_log`` object of a facts answer."""
        return cls(
            source=f.text_or_none("source"),
            xid_lines=f.texts("xid_lines"),
            xid_lines_total=f.integer_or_none("xid_lines_total") or 0,
            error=f.text_or_none("error"),
        )

    def to_json(self) -> JsonObject:
        """The object as ``facts.py`` prints it."""
        return {
            "source": self.source,
            "xid_lines": list(self.xid_lines),
            "xid_lines_total": self.xid_lines_total,
            "error": self.error,
        }


@dataclass(frozen=True)
class DcgmFacts:
    """One ``dcgmi diag -r LEVEL -j`` run on the node, raw.

    Attributes:
        level: The level asked for (1 quick, 2 medium).
        available: ``dcgmi`` is on the node's PATH.
        exit_code: Its exit status (non-zero also when a test failed); None: it did not end.
        output: Its standard output (JSON, compacted by the node when it parsed).
        stderr: The end of its standard error.
        error: Why it did not run to the end (not on PATH, timed out, did not start).
    """

    level: int
    available: bool
    exit_code: int | None = None
    output: str = ""
    stderr: str = ""
    error: str | None = None

    @classmethod
    def read(cls, f: Fields) -> DcgmFacts:
        """Read the ``dcgm`` object of a facts answer."""
        return cls(
            level=f.integer("level"),
            available=f.flag("available"),
            exit_code=f.integer_or_none("exit_code"),
            output=f.text_or_none("output") or "",
            stderr=f.text_or_none("stderr") or "",
            error=f.text_or_none("error"),
        )

    def to_json(self) -> JsonObject:
        """The object as ``facts.py`` prints it."""
        return {
            "level": self.level,
            "available": self.available,
            "exit_code": self.exit_code,
            "output": self.output,
            "stderr": self.stderr,
            "error": self.error,
        }
