"""What preflight needs to know about a node, gathered on the node (stdlib only).

Fed to ``python -`` over the transport like ``agent.py``: ``python - RUN_DIR DCGM_LEVEL
[ENV_FILE]`` where DCGM_LEVEL is the ``dcgmi diag -r`` level to run (0, the default:
none) and ENV_FILE the env file ``rtk up`` left for Ray: it is sent back, with the TLS
certificate and CA it names (never the key), for preflight's ``ray.auth``/``ray.tls``. The Ray
ports this node must reach come inside the script's text: the host replaces the line
``PEERS_JSON = ""`` with its request (``toolkit.nodeinfo.reach_request``), which this script
reads with ``targets``; they are tried ``REACH_CONCURRENCY`` at a time, each connection
given ``CONNECT_TIMEOUT_S``. Prints one JSON object. GPU facts come from ``pynvml`` (nvidia-ml-py)
when the node's Python has it; without it, or without a GPU, ``gpus.available`` is false.

The node's error history is sent raw and bounded, and parsed on the host: the kernel
log's XID lines (``kernel_xids``), DCGM's diagnostic JSON (``dcgm_diag``) and the
InfiniBand/RoCE ports' sysfs files (``read_port_files``, in ``common.py``).
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
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from toolkit.node.common import as_text, read_port_files, run_main

PACKAGES = ("ray", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "deepspeed")
CONNECT_TIMEOUT_S = 2.0
REACH_CONCURRENCY = 64  # connections tried at once (the host's time limit counts waves)
XID_MARK = "NVRM: Xid"
XID_LINES_MAX = 200
LINE_CHARS_MAX = 400
KERNEL_LOG_SINCE = "-7 days"
KERNEL_LOG_TIMEOUT_S = 10.0
# How long ``dcgmi diag -r LEVEL`` may take (the host adds them to its own limit).
DCGM_TIMEOUT_S = {1: 120.0, 2: 600.0}
DCGM_OUTPUT_MAX_CHARS = 512 * 1024
RAY_FILE_MAX_CHARS = 64 * 1024  # an env file or a PEM certificate; more is not rtk's


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
        return {"available": False, "reason": f"nvmlInit failed: {as_text(str(e))}"}
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
        out["driver_version"] = as_text(driver)
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
        devices[as_text(uuid)] = _read_gpu(nvml, handle, i, query)
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
        gpu["name"] = as_text(name)
    put("index", nvml.nvmlDeviceGetIndex)
    pci = query(errors, "pci_bus_id", nvml.nvmlDeviceGetPciInfo, handle)
    if pci is not None:
        gpu["pci_bus_id"] = as_text(pci.busId)
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


def targets(peers_json: str) -> dict[str, tuple[str, int]]:
    """``name:port-name`` -> (address, port) from the host's request (empty: none)."""
    if not peers_json.strip():
        return {}
    request = json.loads(peers_json)
    ports, groups = request["ports"], request["groups"]
    return {
        f"{name}:{port}": (address, int(ports[port]))
        for name, address, group in request["peers"]
        for port in groups[group]
    }


def reach(
    to: dict[str, tuple[str, int]],
    timeout_s: float = CONNECT_TIMEOUT_S,
    concurrency: int = REACH_CONCURRENCY,
) -> dict[str, dict[str, Any]]:
    """Try a TCP connection to every target, ``concurrency`` at a time.

    Each answer is ``{"ok": true, "ms": ...}`` or ``{"ok": false, "error": ...}`` under
    the target's key; a connection not made within ``timeout_s`` failed (filtered).
    """

    def attempt(address: tuple[str, int]) -> dict[str, Any]:
        host, port = address
        began = time.monotonic()
        try:
            with socket.create_connection((host.strip("[]"), port), timeout_s):
                return {"ok": True, "ms": round((time.monotonic() - began) * 1000, 3)}
        except TimeoutError:
            return {"ok": False, "error": f"timed out after {timeout_s:g} s (filtered?)"}
        except OSError as e:
            return {"ok": False, "error": e.strerror or str(e)}

    if not to:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(concurrency, len(to))) as pool:
        return dict(zip(to, pool.map(attempt, to.values()), strict=True))


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kernel_xids(since: str = KERNEL_LOG_SINCE, limit: int = XID_LINES_MAX) -> dict[str, Any]:
    """The kernel log's NVIDIA XID lines, the last ``limit`` of them, and where read.

    ``journalctl -k`` (this boot, since ``since``) when it answers with kernel lines,
    else ``dmesg --time-format iso``; both print an ISO time first on each line.
    Neither readable (not installed, refused to this user, timed out): ``source`` is
    None and ``error`` says what each answered. ``xid_lines_total`` counts the XID
    lines before the cap.
    """
    commands = (
        ("journalctl", ["journalctl", "-k", "-o", "short-iso", "--no-pager", "--since", since]),
        ("dmesg", ["dmesg", "--time-format", "iso"]),
    )
    tried = []
    for source, argv in commands:
        if shutil.which(argv[0]) is None:
            tried.append(f"{source}: not found")
            continue
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=KERNEL_LOG_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            tried.append(f"{source}: timed out after {KERNEL_LOG_TIMEOUT_S:g} s")
            continue
        except OSError as e:
            tried.append(f"{source}: {e.strerror or e}")
            continue
        # journalctl's own lines ("-- No entries --", "-- Boot ... --") are not the kernel's.
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith("-- ")]
        if done.returncode != 0 or not lines:
            said = [line for line in done.stderr.splitlines() if line.strip()]
            why = said[-1].removeprefix(f"{source}: ") if said else f"exit status {done.returncode}"
            tried.append(f"{source}: {_clip(why) if said or done.returncode else 'no entries'}")
            continue
        xids = [line[:LINE_CHARS_MAX] for line in lines if XID_MARK in line]
        return {
            "source": source,
            "xid_lines": xids[-limit:] if limit > 0 else [],
            "xid_lines_total": len(xids),
            "error": None,
        }
    return {"source": None, "xid_lines": [], "xid_lines_total": 0, "error": "; ".join(tried)}


def dcgm_diag(level: int) -> dict[str, Any] | None:
    """``dcgmi diag -r LEVEL -j``'s answer, raw; None when ``level`` is 0 (not asked).

    ``available`` is false when ``dcgmi`` is not on PATH. ``dcgmi`` exits non-zero when
    a test fails, so the exit status is recorded, not judged; ``error`` is set only
    when it did not run to the end (timed out, could not start). JSON output is sent
    compacted, at most ``DCGM_OUTPUT_MAX_CHARS``.
    """
    if level <= 0:
        return None
    out: dict[str, Any] = {
        "level": level,
        "available": False,
        "exit_code": None,
        "output": "",
        "stderr": "",
        "error": None,
    }
    path = shutil.which("dcgmi")
    if path is None:
        return out | {"error": "dcgmi is not on the node's PATH"}
    out["available"] = True
    timeout_s = DCGM_TIMEOUT_S.get(level, max(DCGM_TIMEOUT_S.values()))
    try:
        done = subprocess.run(
            [path, "diag", "-r", str(level), "-j"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return out | {"error": f"dcgmi diag -r {level} timed out after {timeout_s:g} s"}
    except OSError as e:
        return out | {"error": f"dcgmi did not start: {e.strerror or e}"}
    text = done.stdout.strip()
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), separators=(",", ":"))
    return out | {
        "exit_code": done.returncode,
        "output": text[:DCGM_OUTPUT_MAX_CHARS],
        "stderr": _clip(done.stderr, 400),
    }


def ray_files(env_file: str) -> dict[str, str]:
    """The env file's text and, where it turns TLS on, the certificate and CA it names.

    Keys ``env``, ``cert``, ``ca``; a file that cannot be read is left out. The key file
    is never read.
    """
    found: dict[str, str] = {}
    env_text = _read_text(env_file)
    if env_text is None:
        return found
    found["env"] = env_text
    env = _env_values(env_text)
    if env.get("RAY_USE_TLS", "0").lower() not in ("1", "true"):
        return found
    for key, name in (("cert", "RAY_TLS_SERVER_CERT"), ("ca", "RAY_TLS_CA_CERT")):
        text = _read_text(env[name]) if env.get(name) else None
        if text is not None:
            found[key] = text
    return found


def _read_text(path: str) -> str | None:
    try:
        with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as f:
            return f.read(RAY_FILE_MAX_CHARS)
    except OSError:
        return None


def _env_values(text: str) -> dict[str, str]:
    """The ``KEY='value'`` lines of an env file (as ``toolkit.shell.parse_env_file``)."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition("=")
        if not sep or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(rest)
        except ValueError:
            continue
        env[key.strip()] = words[0] if words else ""
    return env


def main(argv: list[str]) -> int:
    """Print this node's facts as one JSON line (``{"error": ...}`` and 3 on a failure)."""
    return run_main(lambda: node_facts(*argv))


def node_facts(run_dir: str = "~", dcgm_text: str = "0", env_file: str = "") -> dict[str, Any]:
    """Everything preflight grades on this node (see the module's docstring)."""
    dcgm_level = int(dcgm_text) if dcgm_text.strip() else 0
    found = host_facts(run_dir)
    if env_file:
        found["ray_files"] = ray_files(env_file)
    found["reach"] = reach(targets(PEERS_JSON))
    found["gpus"] = gpu_facts()
    found["kernel_log"] = kernel_xids()
    found["ib_ports"] = read_port_files()
    dcgm = dcgm_diag(dcgm_level)
    if dcgm is not None:
        found["dcgm"] = dcgm
    return found


# The Ray ports to reach: the host replaces this line with its request, a JSON text
# (``toolkit.nodeinfo.reach_request``); empty when the script is run by hand.
PEERS_JSON = ""

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
