"""Why Ray will not start on a node, in one line with its fix (pure).

Two moments. Before ``ray start``, the probe's facts (``TempDirFacts``, ``RayFacts``)
can already tell that it would fail: ``start_blocker`` names the cause and the node is
not started. After a ``ray start`` that failed (or a raylet that never joined),
``explain_start_failure`` reads its output and what the node said then
(``StartDiagFacts``: Ray's logs, the temp dir, who holds its ports, whether it reaches
the head's ports) and says what went wrong, most specific cause first. Ray's own text
(tracebacks and log lines) stays for ``--verbose``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.inventory.models import PortSettings
from toolkit.node.common import NETWORK_FS_TYPES
from toolkit.nodeinfo.start_facts import RayFacts, StartDiagFacts, TempDirFacts

# Ray writes its session's logs, sockets and the runtime env's unpacked code into its
# temp dir; with less free space than this it fails at start (ENOSPC writing its
# address file) or later in the run.
MIN_TEMP_FREE_BYTES = 256 << 20
SET_TEMP_DIR = "set ray.temp_dir in the inventory to a directory on a local disk"

_NO_RAY = re.compile(r"No module named '?ray'?")
_VERSION = re.compile(r"[Vv]ersion mismatch|was started with .*Ray[: ]+\S+", re.DOTALL)
_NO_SPACE = re.compile(r"Errno 28|No space left on device")
_READ_ONLY = re.compile(r"Errno 30|Read-only file system")
_PORT_TAKEN = re.compile(
    r"[Aa]ddress already in use|[Ff]ailed to bind|port \d+ (?:is )?(?:already )?in use"
)
_PORT_NUMBER = re.compile(r"\b(\d{2,5})\b")
_GCS = re.compile(r"GCS|gcs_server|timed out during startup", re.IGNORECASE)
# Lines of a Python traceback that say nothing of the cause.
_TRACEBACK_NOISE = re.compile(r"^\s*(File \"|Traceback|\^+$|~+$|During handling|The above)")


@dataclass(frozen=True)
class StartFailure:
    """A node's failure to start: the cause in one line, and what it was read from.

    Attributes:
        cause: One line: what went wrong and how to fix it (no node name).
        detail: Ray's output and log lines it was read from (for ``--verbose``).
    """

    cause: str
    detail: str


def port_names(ports: PortSettings) -> dict[int, str]:
    """Port number -> its name in the inventory's ``ports:`` section."""
    return {getattr(ports, name): name for name in type(ports).model_fields}


def size_text(n_bytes: int) -> str:
    """``64 KiB``, ``3.2 GiB``: a size in binary units, for people."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return (
                f"{size:.0f} {unit}"
                if unit in ("B", "KiB") or size == int(size)
                else f"{size:.1f} {unit}"
            )
        size /= 1024
    return f"{size:.1f} TiB"


def temp_dir_problem(facts: TempDirFacts) -> str | None:
    """Why Ray's temp dir cannot serve, or None when it can."""
    where = f"{facts.fs_type or 'unknown file system'} at {facts.mount_point or '?'}"
    error = facts.write_error or ""
    if facts.read_only or _READ_ONLY.search(error):
        return (
            f"Ray's temp dir {facts.path} is on a read-only file system ({where}); "
            f"{SET_TEMP_DIR} that can be written"
        )
    if _NO_SPACE.search(error) or (
        facts.free_bytes is not None and facts.free_bytes < MIN_TEMP_FREE_BYTES
    ):
        free = "no space" if facts.free_bytes is None else size_text(facts.free_bytes)
        return (
            f"Ray's temp dir {facts.path} has {free} free ({where}); Ray needs at least "
            f"{size_text(MIN_TEMP_FREE_BYTES)} there for its logs and sockets: free some, "
            f"or {SET_TEMP_DIR} with room"
        )
    if error:
        return f"Ray's temp dir {facts.path} cannot be written ({error}); {SET_TEMP_DIR}"
    if facts.other_hosts:
        return (
            f"Ray's temp dir {facts.path} is shared with {', '.join(facts.other_hosts)} "
            f"({where}); each node needs its own: {SET_TEMP_DIR}"
        )
    if _network_fs(facts.fs_type):
        return (
            f"Ray's temp dir {facts.path} is on {facts.fs_type} ({facts.mount_point}), a "
            f"network file system: Ray's sockets and session files need the node's own "
            f"disk; {SET_TEMP_DIR}"
        )
    return None


def ray_problem(
    facts: RayFacts, head: str | None = None, head_version: str | None = None
) -> str | None:
    """Why the node's Python cannot run this cluster's Ray, or None when it can.

    ``head_version`` is the head's Ray (None on the head itself, or not known).
    """
    if facts.version is None:
        want = f"ray[default]=={head_version}" if head_version else "ray[default]"
        return (
            f"its Python {facts.executable} has no Ray ({facts.error or 'not found'}): "
            f"install {want} there, or set python: in the inventory to one that has it"
        )
    if head_version is not None and facts.version != head_version:
        return (
            f"Ray {facts.version} here, {head_version} on the head {head}: every node "
            f"needs the same Ray; install ray[default]=={head_version} in {facts.executable}"
        )
    return None


def start_blocker(
    temp_dir: TempDirFacts | None,
    ray: RayFacts | None,
    head: str | None = None,
    head_version: str | None = None,
) -> str | None:
    """Why ``ray start`` would fail on a node, from its probe, or None to go ahead.

    ``ray`` is None for a node whose Ray runs in a container (the host's is not used).
    """
    if temp_dir is not None:
        problem = temp_dir_problem(temp_dir)
        if problem:
            return problem
    if ray is not None:
        return ray_problem(ray, head, head_version)
    return None


def explain_start_failure(
    what: str,
    exit_code: int | None,
    output: str,
    facts: StartDiagFacts | None,
    names: Mapping[int, str],
    head: str,
    head_version: str | None = None,
    host_ray: bool = True,
) -> StartFailure:
    """The cause of a failed ``ray start`` (or of a raylet that did not join).

    Args:
        what: ``ray start``, ``container start``, or ``Ray`` for a node that started
            but did not join.
        exit_code: Its exit status (None: it did not exit, or timed out).
        output: The end of its output.
        facts: What the node said after (None: it could not be asked).
        names: Port number -> its name in the inventory (``port_names``).
        head: The head's name.
        head_version: The head's Ray version, if known.
        host_ray: Whether the node's Ray is the host's (False: a container's, so the
            host's Python is not to blame).
    """
    logs = facts.log_errors if facts is not None else ()
    detail = "\n".join([output.rstrip(), *(f"log: {line}" for line in logs)]).strip()
    cause = _cause(what, exit_code, output, facts, names, head, head_version, host_ray)
    return StartFailure(cause, detail)


def _cause(
    what: str,
    exit_code: int | None,
    output: str,
    facts: StartDiagFacts | None,
    names: Mapping[int, str],
    head: str,
    head_version: str | None,
    host_ray: bool,
) -> str:
    text = "\n".join([output, *(facts.log_errors if facts is not None else ())])
    if facts is not None and host_ray:
        problem = ray_problem(facts.ray, head, head_version)
        if problem:
            return problem
    elif _NO_RAY.search(output):
        return "its Python has no Ray (No module named 'ray'): install ray[default] there"
    if _VERSION.search(text):
        return f"Ray's version differs from the head's ({_line_of(_VERSION, text)})"
    if facts is not None:
        problem = temp_dir_problem(facts.temp_dir)
        if problem:
            return problem
    if _NO_SPACE.search(text):
        return f"no space left for Ray ({_line_of(_NO_SPACE, text)}); free some, or {SET_TEMP_DIR}"
    if _READ_ONLY.search(text):
        return f"Ray could not write its files ({_line_of(_READ_ONLY, text)}); {SET_TEMP_DIR}"
    if facts is not None and facts.port_holders:
        held = ", ".join(
            f"{port} ({names.get(port, 'port')}) by {who}"
            for port, who in sorted(facts.port_holders.items())
        )
        return (
            f"port(s) taken: {held}; stop it, or choose other ports in the inventory's "
            "ports: section"
        )
    if _PORT_TAKEN.search(text):
        line = _line_of(_PORT_TAKEN, text)
        number = _PORT_NUMBER.search(line)
        port = f" {number.group(1)}" if number else ""
        return (
            f"a port{port} Ray binds is taken ({line}); choose other ports in the "
            "inventory's ports: section"
        )
    unreachable = {p: why for p, why in (facts.reach if facts else {}).items() if why}
    if unreachable:
        reached = (len(facts.reach) if facts else 0) - len(unreachable)
        ports = ", ".join(f"{p} ({names.get(p, 'port')}): {why}" for p, why in unreachable.items())
        plural = "s" if len(unreachable) > 1 else ""
        though = f", though it reaches {reached} other port{'s' if reached > 1 else ''} of it"
        return (
            f"cannot reach the head {head} on port{plural} {ports}{though if reached else ''}: "
            "a firewall between the nodes? open these ports to the other nodes, or choose "
            "others in the inventory's ports: section"
        )
    log_line = next((line for line in reversed(logs_of(facts)) if line), None)
    if exit_code is not None:
        exited = f"{what} exited {exit_code}"
    else:
        exited = f"{what} failed" if output.strip() else f"{what} did not join the head in time"
    if log_line and (_GCS.search(output) or not _last_line(output)):
        return f"{exited}; Ray's log says: {log_line}"
    last = _last_line(output)
    if last:
        return f"{exited}: {last}"
    if log_line:
        return f"{exited}; Ray's log says: {log_line}"
    if exit_code is None:
        return exited
    return f"{exited} without a word; --verbose shows its output"


def logs_of(facts: StartDiagFacts | None) -> tuple[str, ...]:
    """The error lines of the node's Ray logs (none without facts)."""
    return facts.log_errors if facts is not None else ()


def _network_fs(fs_type: str | None) -> bool:
    if not fs_type:
        return False
    base = fs_type.split(".", 1)[0]
    return base in NETWORK_FS_TYPES


def _line_of(pattern: re.Pattern[str], text: str) -> str:
    """The (stripped, cut) line of ``text`` where ``pattern`` matches first."""
    for line in text.splitlines():
        if pattern.search(line):
            return _clip(line.strip())
    return ""


def _last_line(output: str) -> str:
    """The last line of ``output`` that says something (not a traceback's frame)."""
    for line in reversed(output.splitlines()):
        if line.strip() and not _TRACEBACK_NOISE.match(line):
            return _clip(line.strip())
    return ""


def _clip(line: str, limit: int = 200) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."
