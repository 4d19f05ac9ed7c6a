"""rtk's node agent: run on a node as ``python - COMMAND ARGS...`` with this file on stdin.

It must work with only the standard library (and Ray for ``status``), on any Python
that Ray supports, because it runs in the node's own environment. It prints one JSON
object on stdout.

Commands:
  probe HEAD_ADDRESS MARKER_DIR PORTS [INTERFACE]  what rtk needs to know before ray start
  stop MARKER_DIR GRACE_S                          stop rtk's Ray there, remove MARKER_DIR
  status DASHBOARD_URL|- GCS_ADDRESS               alive Ray nodes, seen from the head
  smoke GCS_ADDRESS HOSTS                          one Ray task on each node (comma list)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

MARKER_VARIABLE = "RTK_CLUSTER_DIR"


def marked_pids(marker_dir: str) -> dict[int, str]:
    """Processes whose environment carries this cluster's marker, with their names."""
    wanted = f"{MARKER_VARIABLE}={marker_dir}".encode()
    found: dict[int, str] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if wanted in environ and stat.rsplit(")", 1)[-1].split()[0] != "Z":
            found[int(entry)] = stat[stat.find("(") + 1 : stat.rfind(")")]
    return found


def listening_ports() -> set[int]:
    """TCP ports in LISTEN state on this node (IPv4 and IPv6)."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A":
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports


def route_to(head: str, interface: str | None) -> dict[str, Any]:
    """Source address and interface this node uses to reach the head."""
    try:
        head_ip = socket.gethostbyname(head)
    except OSError as e:
        return {"error": f"cannot resolve head address {head!r}: {e}"}
    result: dict[str, Any] = {"head_ip": head_ip, "source_ip": None, "interface": interface}
    try:
        out = subprocess.run(
            ["ip", "-o", "route", "get", head_ip],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    dev = re.search(r"\bdev (\S+)", out)
    src = re.search(r"\bsrc (\S+)", out)
    if out.startswith("local"):
        # The head is this node: use the interface that owns the head's address.
        result["source_ip"] = head_ip
        result["interface"] = interface or _interface_owning(head_ip) or (dev and dev.group(1))
        return result
    if src:
        result["source_ip"] = src.group(1)
    if dev and not interface:
        result["interface"] = dev.group(1)
    if result["source_ip"] is None:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.connect((head_ip, 9))
            result["source_ip"] = probe.getsockname()[0]
        except OSError as e:
            result["error"] = f"no route to head {head_ip}: {e}"
        finally:
            probe.close()
    return result


def _interface_owning(ip: str) -> str | None:
    try:
        out = subprocess.run(
            ["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == ip:
            return fields[1]
    return None


def probe(head: str, marker_dir: str, ports_text: str, interface: str = "") -> dict[str, Any]:
    """Everything rtk decides on before starting Ray on this node."""
    pids = marked_pids(marker_dir)
    ports = [int(p) for p in ports_text.split(",") if p]
    busy = sorted(set(ports) & listening_ports()) if not pids else []
    return {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "route": route_to(head, interface or None),
        "rtk_pids": sorted(pids),
        "raylet_running": "raylet" in pids.values(),
        "busy_ports": busy,
    }


def stop(marker_dir: str, grace_text: str) -> dict[str, Any]:
    """Stop this cluster's processes and remove MARKER_DIR.

    Like ``ray stop``, in two waves: everything but the GCS first (the GCS waits for
    its raylets before it exits on SIGTERM), then the GCS. What outlives a wave's
    grace period gets SIGKILL.
    """
    grace_s = float(grace_text)
    pids = marked_pids(marker_dir)
    waves = [
        [p for p, name in pids.items() if name != "gcs_server"],
        [p for p, name in pids.items() if name == "gcs_server"],
    ]
    killed = 0
    for wave in waves:
        killed += _terminate(wave, marker_dir, grace_s)
    # Workers forked while the first wave ran carry the marker too.
    killed += _terminate(sorted(marked_pids(marker_dir)), marker_dir, 1.0)
    left = sorted(marked_pids(marker_dir))
    removed = False
    if not left and os.path.isdir(marker_dir):
        shutil.rmtree(marker_dir, ignore_errors=True)
        removed = not os.path.exists(marker_dir)
    return {"stopped": len(pids), "killed": killed, "left": left, "removed": removed}


def _terminate(pids: list[int], marker_dir: str, grace_s: float) -> int:
    """SIGTERM ``pids``, wait up to ``grace_s``, SIGKILL survivors; count the killed."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive &= set(marked_pids(marker_dir))
    for pid in alive:
        _signal(pid, signal.SIGKILL)
    if alive:
        time.sleep(0.2)
    return len(alive)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def status(dashboard_url: str, gcs_address: str) -> dict[str, Any]:
    """Ray's view of the cluster's nodes.

    From the dashboard's state API over plain HTTP when there is a dashboard (no Ray
    import: a few ms), else through a short-lived driver on the GCS (``-`` as URL).
    """
    if dashboard_url != "-":
        answer = _get_json(f"{dashboard_url}/api/v0/nodes?limit=10000&detail=1")
        version = _get_json(f"{dashboard_url}/api/version").get("ray_version")
        nodes = [
            {
                "node_id": n["node_id"],
                "node_ip": n["node_ip"],
                "state": n["state"],
                "is_head": bool(n.get("is_head_node")),
                "resources": dict(n.get("resources_total") or {}),
            }
            for n in answer["data"]["result"]["result"]
        ]
        return {"ray_version": version, "nodes": nodes}
    import ray

    ray.init(address=gcs_address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        nodes = [
            {
                "node_id": n["NodeID"],
                "node_ip": n["NodeManagerAddress"],
                "state": "ALIVE" if n["Alive"] else "DEAD",
                "is_head": "node:__internal_head__" in n["Resources"],
                "resources": dict(n["Resources"]),
            }
            for n in ray.nodes()  # type: ignore[no-untyped-call]
        ]
    finally:
        ray.shutdown()
    return {"ray_version": ray.__version__, "nodes": nodes}


def _get_json(url: str) -> dict[str, Any]:
    """GET a dashboard URL with the cluster's token (when token auth is on)."""
    headers = {}
    if os.environ.get("RAY_AUTH_MODE") == "token":
        token = os.environ.get("RAY_AUTH_TOKEN", "")
        path = os.environ.get("RAY_AUTH_TOKEN_PATH")
        if path:
            with open(path) as f:
                token = f.read().strip()
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            data: dict[str, Any] = json.load(response)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise PermissionError(f"Unauthorized: the dashboard refused rtk's token ({e})") from e
        raise
    except urllib.error.URLError as e:
        raise ConnectionError(f"Failed to connect to {url}: {e.reason}") from e
    return data


def smoke(gcs_address: str, hosts_text: str) -> dict[str, Any]:
    """Run one Ray task pinned to each named node; report where each one ran."""
    import ray

    ray.init(address=gcs_address, logging_level=logging.ERROR, log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        def where() -> dict[str, str]:
            return {"hostname": socket.gethostname(), "node": os.environ.get("RTK_NODE", "")}

        hosts = [h for h in hosts_text.split(",") if h]
        refs = {h: where.options(resources={f"rtk_host:{h}": 0.001}).remote() for h in hosts}
        return {"ran": {h: ray.get(ref, timeout=120) for h, ref in refs.items()}}
    finally:
        ray.shutdown()


# What rtk brings back from a run directory: never checkpoints, which can be huge.
PACK_PATTERNS = (
    "telemetry/**/*",
    "markers/*.jsonl",
    "metrics*.jsonl",
    "*.json",
)


def pack(run_dir: str) -> dict[str, Any]:
    """A run directory's telemetry, markers and metrics, as a base64 tar.gz."""
    import base64
    import io
    import tarfile
    from pathlib import Path

    root = Path(os.path.expanduser(run_dir))
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory {root} on this node")
    buffer = io.BytesIO()
    names = []
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for pattern in PACK_PATTERNS:
            for path in sorted(root.glob(pattern)):
                if path.is_file():
                    name = str(path.relative_to(root))
                    tar.add(path, arcname=name)
                    names.append(name)
    return {
        "run_dir": str(root),
        "files": names,
        "tar_gz_b64": base64.b64encode(buffer.getvalue()).decode(),
    }


COMMANDS: dict[str, Callable[..., dict[str, Any]]] = {
    "probe": probe,
    "stop": stop,
    "status": status,
    "smoke": smoke,
    "pack": pack,
}


def main(argv: list[str]) -> int:
    """Run one command and print its JSON result; exit 2 on bad usage, 3 on failure."""
    if not argv or argv[0] not in COMMANDS:
        print(json.dumps({"error": f"usage: agent {'|'.join(COMMANDS)} ARGS"}))
        return 2
    try:
        result = COMMANDS[argv[0]](*argv[1:])
    except Exception as e:  # noqa: BLE001 - reported to rtk as data, never a traceback
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 3
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
