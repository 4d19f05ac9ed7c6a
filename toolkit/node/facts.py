"""What preflight needs to know about a node, gathered on the node (stdlib only).

Fed to ``python -`` over the transport like ``agent.py``:
``python - RUN_DIR PEERS`` where PEERS is ``name=host:port,...`` (the ports this node
must reach). Prints one JSON object. GPU facts come from ``pynvml`` (nvidia-ml-py) when
the node's Python has it; without it, or without a GPU, ``gpus.available`` is false.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import resource
import socket
import sys
import time
from collections.abc import Callable
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


def gpu_facts(nvml: Any = None) -> dict[str, Any]:
    """Every GPU's health as NVML sees it, keyed by UUID under ``devices``.

    ``nvml`` is the ``pynvml`` module or an object shaped like it (tests pass a fake);
    ``None`` imports ``pynvml``. No pynvml, or no NVML library or GPU: ``available``
    is false with a ``reason`` (not an error: CPU nodes have none). A field that the GPU
    does not support, or that this user may not read, is left out; any other NVML
    error is recorded under the GPU's ``errors``.
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError as e:
            return {"available": False, "reason": f"pynvml (nvidia-ml-py) does not import: {e}"}
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError; OSError from a broken library
        return {"available": False, "reason": f"nvmlInit failed: {_text(str(e))}"}
    try:
        return _read_gpus(nvml)
    finally:
        with contextlib.suppress(Exception):  # nothing to do about a failed shutdown
            nvml.nvmlShutdown()


def _read_gpus(nvml: Any) -> dict[str, Any]:
    skip = {
        getattr(nvml, name, None)
        for name in (
            "NVML_ERROR_NOT_SUPPORTED",
            "NVML_ERROR_NO_PERMISSION",
            "NVML_ERROR_FUNCTION_NOT_FOUND",
        )
    }
    out: dict[str, Any] = {"available": True}
    top_errors: dict[str, str] = {}

    def query(errors: dict[str, str], key: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) not in skip:
                errors[key] = str(e)
            return None

    driver = query(top_errors, "driver_version", nvml.nvmlSystemGetDriverVersion)
    if driver is not None:
        out["driver_version"] = _text(driver)
    cuda = query(top_errors, "cuda_driver_version", nvml.nvmlSystemGetCudaDriverVersion)
    if cuda is not None:
        out["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    count = query(top_errors, "count", nvml.nvmlDeviceGetCount)
    out["count"] = count or 0
    devices: dict[str, dict[str, Any]] = {}
    for i in range(count or 0):
        handle = query(top_errors, f"gpu {i}", nvml.nvmlDeviceGetHandleByIndex, i)
        uuid = (
            None
            if handle is None
            else query(top_errors, f"gpu {i}", nvml.nvmlDeviceGetUUID, handle)
        )
        if uuid is None:
            top_errors.setdefault(f"gpu {i}", "no handle or UUID")
            continue
        devices[_text(uuid)] = _read_gpu(nvml, handle, i, query)
    out["devices"] = devices
    if top_errors:
        out["errors"] = top_errors
    return out


def _read_gpu(nvml: Any, handle: Any, index: int, query: Callable[..., Any]) -> dict[str, Any]:
    errors: dict[str, str] = {}
    gpu: dict[str, Any] = {"index": index}

    def put(key: str, fn: Callable[..., Any], *args: Any) -> Any:
        value = query(errors, key, fn, handle, *args)
        if value is not None:
            gpu[key] = value
        return value

    name = put("name", nvml.nvmlDeviceGetName)
    if name is not None:
        gpu["name"] = _text(name)
    put("index", nvml.nvmlDeviceGetIndex)
    enabled = nvml.NVML_FEATURE_ENABLED
    persistence = query(errors, "persistence_mode", nvml.nvmlDeviceGetPersistenceMode, handle)
    if persistence is not None:
        gpu["persistence_mode"] = persistence == enabled
    mig = query(errors, "mig_mode", nvml.nvmlDeviceGetMigMode, handle)
    if mig is not None:
        gpu["mig_enabled"] = mig[0] == nvml.NVML_DEVICE_MIG_ENABLE
    ecc = query(errors, "ecc_mode", nvml.nvmlDeviceGetEccMode, handle)
    if ecc is not None:
        gpu["ecc_enabled"] = ecc[0] == enabled
        gpu["ecc_pending_enabled"] = ecc[1] == enabled
    put(
        "ecc_volatile_uncorrected",
        nvml.nvmlDeviceGetTotalEccErrors,
        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        nvml.NVML_VOLATILE_ECC,
    )
    rows = query(errors, "remapped_rows", nvml.nvmlDeviceGetRemappedRows, handle)
    if rows is not None:
        corrected, uncorrected, pending, failure = rows
        gpu["remapped_rows"] = {
            "corrected": int(corrected),
            "uncorrected": int(uncorrected),
            "pending": bool(pending),
            "failure": bool(failure),
        }
    put("clocks_event_reasons", nvml.nvmlDeviceGetCurrentClocksEventReasons)
    put("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration)
    put("pcie_gen_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration)
    put("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth)
    put("pcie_width_max", nvml.nvmlDeviceGetMaxPcieLinkWidth)
    links: list[bool] = []
    # Links 0..N-1 exist; the first NotSupported / InvalidArgument is past the last one.
    quiet = {
        nvml.NVML_ERROR_NOT_SUPPORTED,
        nvml.NVML_ERROR_INVALID_ARGUMENT,
        nvml.NVML_ERROR_NO_PERMISSION,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            links.append(nvml.nvmlDeviceGetNvLinkState(handle, link) == enabled)
        except nvml.NVMLError as e:
            if getattr(e, "value", None) not in quiet:
                errors["nvlink_active"] = str(e)
            break
    if links:
        gpu["nvlink_active"] = links
    if errors:
        gpu["errors"] = errors
    return gpu


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


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
    facts["gpus"] = gpu_facts()
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
