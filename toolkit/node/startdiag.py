"""Why Ray did not start on this node: ``python - TEMP_DIR PORTS [HEAD_IP HEAD_PORTS]``.

Run on a node with this file on stdin (``toolkit.nodeinfo.script.NodeScript``) after
its ``ray start`` failed or its raylet did not join, so it must work with only the
standard library. It reads what the node knows and prints one JSON line:

  temp_dir   Ray's temp dir: file system, free space, whether it can be written, other
             hosts' names in it (a shared temp dir)
  ray        whether this Python has Ray, and its version
  ports      of PORTS (comma list, the node's pinned ports), those another process
             listens on, with the program and its pid
  reach      each of HEAD_PORTS on HEAD_IP: null when a connection opened, else why not
  logs       the last lines of Ray's own logs of the newest session (raylet, GCS,
             dashboard agent, runtime env agent), and their error lines

Everything is bounded: lines per file, characters per line, the time per connection.
rtk's classifier (``toolkit.lifecycle.failures.causes``) turns the answer into one line.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import socket
import sys
from typing import Any

from toolkit.node.common import UsageError, port_holders, ray_facts, run_main, temp_dir_facts

LOG_FILES = (
    "raylet.out",
    "raylet.err",
    "gcs_server.out",
    "gcs_server.err",
    "dashboard_agent.log",
    "runtime_env_agent.log",
)
TAIL_LINES = 30
TAIL_BYTES = 64 << 10
LINE_CHARS = 300
ERROR_LINES = 20
CONNECT_TIMEOUT_S = 3.0
# Ray's C++ logs mark errors "[E ..." or "[C ..." (glog's severity letter after the
# time stamp in Ray's own format: "[2026-11-27 14:41:01,123 E 365 365] ..."); its
# Python logs write "ERROR"; a check that failed says "Check failed".
_ERROR = re.compile(r"^\[[^\]]* [EFC] \d+ \d+\]|\bERROR\b|Check failed|Traceback|Error:")


def newest_session(temp_dir: str) -> str | None:
    """The newest ``session_*`` directory in ``temp_dir`` (``session_latest`` first)."""
    latest = os.path.join(temp_dir, "session_latest")
    if os.path.isdir(latest):
        return os.path.realpath(latest)
    try:
        sessions = [e for e in os.scandir(temp_dir) if e.name.startswith("session_2")]
    except OSError:
        return None
    if not sessions:
        return None
    return max(sessions, key=lambda e: e.stat().st_mtime).path


def tail_lines(path: str, lines: int = TAIL_LINES, limit: int = TAIL_BYTES) -> list[str] | None:
    """The last ``lines`` lines of ``path`` (read from its last ``limit`` bytes), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > limit:
        text = text[1:]  # the first line read is cut
    return [line[:LINE_CHARS] for line in text[-lines:] if line.strip()]


def ray_logs(temp_dir: str) -> dict[str, Any]:
    """The newest session's log tails and their error lines (the last ``ERROR_LINES``)."""
    session = newest_session(temp_dir)
    out: dict[str, Any] = {"session": session, "tails": {}, "errors": []}
    if session is None:
        return out
    errors: list[str] = []
    for name in LOG_FILES:
        lines = tail_lines(os.path.join(session, "logs", name))
        if lines is None:
            continue
        out["tails"][name] = lines
        errors += [f"{name}: {line}" for line in lines if _ERROR.search(line)]
    out["errors"] = errors[-ERROR_LINES:]
    return out


def reach(host: str, ports: list[int]) -> dict[str, str | None]:
    """Each port of ``host``: None when a TCP connection opened, else why not."""

    def attempt(port: int) -> str | None:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return None
        except OSError as e:
            return "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))

    if not ports:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(ports))) as pool:
        answers = dict(zip(ports, pool.map(attempt, ports), strict=True))
    return {str(port): why for port, why in answers.items()}


def diagnose(
    temp_dir: str, ports_text: str, head: str = "", head_ports_text: str = ""
) -> dict[str, Any]:
    """Everything the classifier reads (see the module's docstring)."""
    ports = [int(p) for p in ports_text.split(",") if p]
    head_ports = [int(p) for p in head_ports_text.split(",") if p]
    hostname = socket.gethostname()
    return {
        "hostname": hostname,
        "temp_dir": temp_dir_facts(temp_dir, hostname, stamp=False),
        "ray": ray_facts(),
        "ports": {str(port): who for port, who in sorted(port_holders(ports).items())},
        "reach": reach(head, head_ports) if head else {},
        "logs": ray_logs(temp_dir),
    }


def main(argv: list[str]) -> int:
    """Print the JSON answer; exit 2 on bad usage, 3 on failure."""

    def call() -> dict[str, Any]:
        if len(argv) not in (2, 4):
            raise UsageError("startdiag TEMP_DIR PORTS [HEAD_IP HEAD_PORTS]")
        return diagnose(*argv)

    return run_main(call)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
