"""What preflight needs to know about a node, gathered on the node (stdlib only).

Fed to ``python -`` over the transport like ``agent.py``:
``python - RUN_DIR PEERS`` where PEERS is ``name=host:port,...`` (the ports this node
must reach). Prints one JSON object.
"""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import json
import os
import platform
import resource
import socket
import sys
import time
from typing import Any

PACKAGES = ("ray", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "deepspeed")
CONNECT_TIMEOUT_S = 2.0


def host_facts(run_dir: str) -> dict[str, Any]:
    """Shared memory, limits, name resolution, free disk, ephemeral ports, versions."""
    hostname = socket.gethostname()
    try:
        addresses = sorted({a[4][0] for a in socket.getaddrinfo(hostname, None)})
    except OSError as e:
        addresses = [f"unresolvable: {e}"]
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    probe = os.path.expanduser(run_dir)
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    disk = os.statvfs(probe or "/")
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        ephemeral: list[int] | None = [low, high]
    except (OSError, ValueError):
        ephemeral = None
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "hostname": hostname,
        "hostname_addresses": addresses,
        "dev_shm_bytes": shm.f_blocks * shm.f_frsize if shm else None,
        "memlock_bytes": None if memlock == resource.RLIM_INFINITY else memlock,
        "nofile": None if nofile == resource.RLIM_INFINITY else nofile,
        "disk_path": probe,
        "disk_free_bytes": disk.f_bavail * disk.f_frsize,
        "ephemeral_ports": ephemeral,
        "versions": versions,
        "python_executable": sys.executable,
        "wall_s": time.time(),
    }


def reach(peers_text: str) -> dict[str, dict[str, Any]]:
    """Try a TCP connection to every ``name=host:port``; all at once."""

    def attempt(target: str) -> dict[str, Any]:
        host, _, port = target.rpartition(":")
        began = time.monotonic()
        try:
            with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
                return {"ok": True, "ms": (time.monotonic() - began) * 1000}
        except TimeoutError:
            return {"ok": False, "error": f"timed out after {CONNECT_TIMEOUT_S:g} s (filtered?)"}
        except OSError as e:
            return {"ok": False, "error": e.strerror or str(e)}

    peers = dict(p.split("=", 1) for p in peers_text.split(",") if "=" in p)
    if not peers:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, len(peers))) as pool:
        results = dict(zip(peers, pool.map(attempt, peers.values()), strict=True))
    return results


def main(argv: list[str]) -> int:
    """Print this node's facts as JSON."""
    run_dir = argv[0] if argv else "~"
    peers = argv[1] if len(argv) > 1 else ""
    facts = host_facts(run_dir)
    facts["reach"] = reach(peers)
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
