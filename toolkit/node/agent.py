"""rtk's node agent: run on a node as ``python - COMMAND ARGS...`` with this file on stdin.

It must work with only the standard library (and Ray for ``status``), on any Python
that Ray supports, because it runs in the node's own environment. It prints one JSON
object on stdout.

Commands:
  probe HEAD_ADDRESS MARKER_DIR PORTS [INTERFACE [CONTAINER_JSON]]
                                                   what rtk needs to know before ray start
                                                   (and of the container runtime, if any)
  stop MARKER_DIR GRACE_S                          stop rtk's Ray there, remove MARKER_DIR
  status DASHBOARD_URL|- GCS_ADDRESS               alive Ray nodes, seen from the head
  smoke GCS_ADDRESS HOSTS                          one Ray task on each node (comma list)
  pack RUN_DIR OUT_PATH PATTERNS                   a run's results into a tar.gz (globs,
                                                   comma list)
"""

from __future__ import annotations

import contextlib
import importlib.util
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

from toolkit.node.common import (
    GPU_RESTORE_FILE,
    SYS_INFINIBAND,
    listening_sockets,
    port_holders,
    ray_facts,
    run_command,
    sorted_names,
    source_digest,
    temp_dir_facts,
)

MARKER_VARIABLE = "RTK_CLUSTER_DIR"
# Container runtimes: how each tells its version (docker's answer needs its daemon).
CONTAINER_VERSION_FORMAT = {"docker": "{{.Server.Version}}", "podman": "{{.Client.Version}}"}
CONTAINER_TIMEOUT_S = 20.0
# Where podman (and docker >= 25) find CDI specs, which name the GPUs as nvidia.com/gpu.
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_GPU_KIND = "nvidia.com/gpu"
# What docker's --gpus calls: the NVIDIA Container Toolkit's hook.
NVIDIA_HOOK = "nvidia-container-runtime-hook"
# The package rtk is imported as: a node with the same source needs none shipped.
RTK_PACKAGE = "toolkit"


def marked_pids(marker_dir: str) -> dict[int, str]:
    """This cluster's processes on this node, with their names.

    A process is this cluster's when its environment carries the marker, or when it is
    a Ray process that renamed itself (``ray::DashboardAgent``, ``ray-dashboard-*``):
    setproctitle reuses the memory of the environment for the longer title, so the
    marker is gone, but such a process holds files under the cluster's temp dir open.
    """
    wanted = f"{MARKER_VARIABLE}={marker_dir}".encode()
    prefix = marker_dir.rstrip("/") + "/"
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
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read(64)
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        renamed = title.startswith((b"ray::", b"ray-dashboard-"))
        if wanted in environ or (renamed and _holds_files_under(entry, prefix)):
            found[int(entry)] = stat[stat.find("(") + 1 : stat.rfind(")")]
    return found


def _holds_files_under(pid: str, prefix: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            continue
    return False


def listening_ports() -> set[int]:
    """TCP ports in LISTEN state on this node (IPv4 and IPv6)."""
    return set(listening_sockets().values())


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
    if not result["interface"] and result["source_ip"]:
        # No `ip` command (a container or VM image without iproute2): the interface is
        # the one that owns the address the kernel picked toward the head.
        result["interface"] = _interface_owning(result["source_ip"])
    return result


def _interface_owning(ip: str) -> str | None:
    try:
        out = subprocess.run(
            ["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == ip:
            return fields[1]
    for name, address in ipv4_addresses().items():
        if address == ip:
            return name
    return None


SIOCGIFADDR = 0x8915  # Linux: an interface's (first) IPv4 address


def ipv4_addresses() -> dict[str, str]:
    """Each interface's IPv4 address, asked of the kernel without the ``ip`` command."""
    import fcntl
    import struct

    found: dict[str, str] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name[:15].encode())
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue  # no IPv4 address on it
            found[name] = socket.inet_ntoa(answer[20:24])
    return found
    return None


# Network facts for the NCCL / Gloo profiles (toolkit.netenv). Paths are read under a
# root so that tests can point them at recorded sysfs trees; a missing or unreadable
# file is an absent fact, never an error.
SYS_NET = "sys/class/net"
NET_TYPES = {"1": "ether", "32": "infiniband", "772": "loopback", "776": "ipv6-tunnel"}
GID_SCAN = 16  # GID table entries read per RoCE/IB port (the first ones are the populated ones)
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    """``"9000"``, ``"0x1"`` or ``"-1"`` as an int; None when absent or not a number."""
    if text is None:
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _after_colon(text: str | None) -> str | None:
    """``"4: ACTIVE"`` -> ``"ACTIVE"`` (sysfs port states carry their numeric code)."""
    return text.split(":", 1)[-1].strip() if text else None


def _link(root: str, name: str, nested: bool = True) -> dict[str, Any]:
    """One network interface from /sys/class/net: MTU, state, speed, bonding."""
    base = os.path.join(root, SYS_NET, name)
    speed = _number(_read(os.path.join(base, "speed")))
    kind = _read(os.path.join(base, "type"))
    master = os.path.join(base, "master")
    link: dict[str, Any] = {
        "name": name,
        "exists": os.path.isdir(base),
        "mtu": _number(_read(os.path.join(base, "mtu"))),
        "operstate": _read(os.path.join(base, "operstate")),
        "speed_mbps": speed if speed is not None and speed > 0 else None,
        "type": NET_TYPES.get(kind or "", kind),
        "master": os.path.basename(os.readlink(master)) if os.path.islink(master) else None,
        "lower": [n[len("lower_") :] for n in sorted_names(base) if n.startswith("lower_")],
        "bond": None,
    }
    slaves = _read(os.path.join(base, "bonding", "slaves"))
    if slaves is not None:
        mode = _read(os.path.join(base, "bonding", "mode")) or ""
        link["bond"] = {
            "mode": mode.split()[0] if mode else None,
            "slaves": [_link(root, s, False) if nested else {"name": s} for s in slaves.split()],
        }
    return link


def _route_devices(root: str, interface: str) -> list[str]:
    """The interface and every device under it (a bond's slaves, a VLAN's parent...)."""
    seen: list[str] = []
    todo = [interface]
    while todo and len(seen) < 32:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        base = os.path.join(root, SYS_NET, name)
        todo += (_read(os.path.join(base, "bonding", "slaves")) or "").split()
        todo += [n[len("lower_") :] for n in sorted_names(base) if n.startswith("lower_")]
    return seen


def _hca_port(base: str, number: str) -> dict[str, Any]:
    """One HCA port: state, link layer, rate, and its first populated GIDs."""
    path = os.path.join(base, "ports", number)
    rate = _read(os.path.join(path, "rate"))
    rate_match = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    gids = []
    indexes = sorted(int(i) for i in sorted_names(os.path.join(path, "gids")) if i.isdigit())
    for index in indexes[:GID_SCAN]:
        gid = _read(os.path.join(path, "gids", str(index)))
        if not gid or gid == ZERO_GID:
            continue
        attrs = os.path.join(path, "gid_attrs")
        gids.append(
            {
                "index": index,
                "gid": gid,
                "type": _read(os.path.join(attrs, "types", str(index))),
                "ndev": _read(os.path.join(attrs, "ndevs", str(index))),
            }
        )
    return {
        "port": int(number),
        "state": _after_colon(_read(os.path.join(path, "state"))),
        "phys_state": _after_colon(_read(os.path.join(path, "phys_state"))),
        "link_layer": _read(os.path.join(path, "link_layer")),
        "rate": rate,
        "rate_gbps": float(rate_match.group(1)) if rate_match else None,
        "netdevs": [],
        "gids": gids,
    }


def _hca(root: str, name: str) -> dict[str, Any]:
    """One RDMA device: its ports and the network interfaces on each port."""
    base = os.path.join(root, SYS_INFINIBAND, name)
    numbers = sorted((n for n in sorted_names(os.path.join(base, "ports")) if n.isdigit()), key=int)
    ports = {int(n): _hca_port(base, n) for n in numbers}
    for netdev in sorted_names(os.path.join(base, "device", "net")):
        where = os.path.join(base, "device", "net", netdev)
        index = _number(_read(os.path.join(where, "dev_port")))
        if index is None:
            index = _number(_read(os.path.join(where, "dev_id")))
        number = index + 1 if index is not None and index + 1 in ports else min(ports, default=1)
        if number in ports:
            ports[number]["netdevs"].append(netdev)
    for port in ports.values():
        # RoCE GIDs name the netdev holding their address: a bond over the port's netdev.
        port["gid_netdevs"] = sorted({g["ndev"] for g in port["gids"] if g["ndev"]})
    return {
        "name": name,
        "software": name.startswith(("rxe", "siw")) or os.path.exists(os.path.join(base, "parent")),
        "fw_ver": _read(os.path.join(base, "fw_ver")),
        "ports": list(ports.values()),
    }


def network_facts(interface: str | None, root: str = "/") -> dict[str, Any]:
    """What the NCCL/Gloo profile needs: the route interface and the RDMA ports.

    Reads sysfs under ``root``: the interface's MTU, state, speed and bonding from
    /sys/class/net, every port of /sys/class/infiniband with its state, link layer,
    rate and netdevs, and which ports back the interface (directly or under a bond).
    Never raises: what cannot be read is left out, an unexpected failure is "error".
    """
    facts: dict[str, Any] = {
        "interface": interface,
        "link": None,
        "route_devices": [],
        "infiniband": False,
        "hcas": [],
        "route_ports": [],
    }
    try:
        if interface:
            facts["link"] = _link(root, interface)
            facts["route_devices"] = _route_devices(root, interface)
        ib = os.path.join(root, SYS_INFINIBAND)
        facts["infiniband"] = os.path.isdir(ib)
        for name in sorted_names(ib):
            hca = _hca(root, name)
            for port in hca["ports"]:
                served = set(port["netdevs"]) | set(port["gid_netdevs"])
                port["backs_route"] = bool(served & set(facts["route_devices"]))
                if port["backs_route"]:
                    facts["route_ports"].append(f"{name}:{port['port']}")
            facts["hcas"].append(hca)
    except Exception as e:  # noqa: BLE001 - facts are best effort; rtk shows what failed
        facts["error"] = f"{type(e).__name__}: {e}"
    return facts


def rtk_source(package: str = RTK_PACKAGE) -> dict[str, str] | None:
    """Where this Python imports rtk from, and its digest; None when it cannot.

    The current directory is left out of the search: Ray's workers do not start
    there, so only an installed rtk counts.
    """
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    if spec is None or not spec.origin or not spec.submodule_search_locations:
        return None  # not there, or a namespace package: no rtk
    root = os.path.dirname(spec.origin)
    try:
        return {"path": root, "digest": source_digest(root)}
    except OSError:
        return None


def _quiet(argv: list[str], timeout_s: float = CONTAINER_TIMEOUT_S) -> tuple[int, str, str]:
    """Run ``argv``; its exit status, stdout and stderr (124: timed out, 127: not run)."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(argv[:2])} did not answer within {timeout_s:g} s"
    except OSError as e:
        return 127, "", str(e)
    return done.returncode, done.stdout, done.stderr


def _last_line(*texts: str) -> str:
    for text in texts:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        if lines:
            return lines[-1].strip()[:300]
    return ""


def gpu_hook(runtime: str, binary: str, cdi_dirs: tuple[str, ...] = CDI_DIRS) -> dict[str, Any]:
    """Whether the runtime can hand the node's GPUs to a container, and through what.

    docker: an ``nvidia`` runtime in ``docker info``, or the NVIDIA Container Toolkit's
    hook on PATH (what ``--gpus`` runs). podman: a CDI spec naming nvidia.com/gpu.
    """
    if runtime == "docker":
        code, out, _ = _quiet([binary, "info", "--format", "{{json .Runtimes}}"])
        try:
            runtimes = json.loads(out) if code == 0 else {}
        except json.JSONDecodeError:
            runtimes = {}
        if isinstance(runtimes, dict) and "nvidia" in runtimes:
            return {"found": True, "via": "docker's nvidia runtime"}
        hook = shutil.which(NVIDIA_HOOK)
        return {"found": hook is not None, "via": hook or ""}
    for folder in cdi_dirs:
        for name in sorted_names(folder):
            path = os.path.join(folder, name)
            if not name.endswith((".yaml", ".yml", ".json")):
                continue
            text = _read(path)
            if text is not None and CDI_GPU_KIND in text:
                return {"found": True, "via": path}
    return {"found": False, "via": ""}


def container_facts(request_text: str, cdi_dirs: tuple[str, ...] = CDI_DIRS) -> dict[str, Any]:
    """The node's container runtime: does it answer, the image, the GPU hook, rtk's container.

    REQUEST is JSON: runtime, image, name, labels (``key=value``), gpus (true: look
    for the GPU hook). ``state`` is the container's (``running``, ``exited``...) when
    one with that name and those labels exists, else null.
    """
    request = json.loads(request_text)
    runtime = str(request["runtime"])
    binary = shutil.which(runtime)
    facts: dict[str, Any] = {
        "runtime": runtime,
        "path": binary,
        "version": None,
        "error": None,
        "image_present": None,
        "gpu_hook": None,
        "state": None,
    }
    if binary is None:
        facts["error"] = f"{runtime} not found on PATH"
        return facts
    version = CONTAINER_VERSION_FORMAT.get(runtime, "{{.Client.Version}}")
    code, out, err = _quiet([binary, "version", "--format", version])
    if code != 0:
        facts["error"] = _last_line(err, out) or f"{runtime} version exited {code}"
        return facts
    facts["version"] = out.strip()
    image = str(request["image"])
    if runtime == "podman":
        code, _, _ = _quiet([binary, "image", "exists", image])
    else:
        code, _, _ = _quiet([binary, "image", "inspect", "--format", "{{.Id}}", image])
    facts["image_present"] = code == 0
    if request.get("gpus"):
        facts["gpu_hook"] = gpu_hook(runtime, binary, cdi_dirs)
    filters = [w for label in request["labels"] for w in ("--filter", f"label={label}")]
    name = f"name=^{request['name']}$"
    argv = [binary, "ps", "-a", *filters, "--filter", name, "--format", "{{.State}}"]
    code, out, err = _quiet(argv)
    if code != 0:
        facts["error"] = _last_line(err, out) or f"{runtime} ps exited {code}"
    else:
        states = out.split()
        facts["state"] = states[0].lower() if states else None
    return facts


def probe(
    head: str, marker_dir: str, ports_text: str, interface: str = "", container: str = ""
) -> dict[str, Any]:
    """Everything rtk decides on before starting Ray on this node.

    With ``container`` (``container_facts``'s request), the container runtime's facts.
    """
    pids = marked_pids(marker_dir)
    ports = [int(p) for p in ports_text.split(",") if p]
    busy = sorted(set(ports) & listening_ports()) if not pids else []
    route = route_to(head, interface or None)
    network = network_facts(route.get("interface"))
    if interface:
        network["interface_source"] = "inventory"
    elif route.get("source_ip") is not None and route.get("source_ip") == route.get("head_ip"):
        network["interface_source"] = "head"
    else:
        network["interface_source"] = "route"
    rtk = rtk_source()
    holders = port_holders(busy)
    hostname = socket.gethostname()
    gpu_restore = os.path.join(marker_dir, GPU_RESTORE_FILE)
    return {
        "hostname": hostname,
        "python": platform.python_version(),
        "route": route,
        "network": network,
        "rtk_pids": sorted(pids),
        "raylet_running": "raylet" in pids.values(),
        "busy_ports": busy,
        # Ray's temp dir is the marker dir; the probe leaves this host's name in it.
        "temp_dir": temp_dir_facts(marker_dir, hostname, stamp=True),
        "ray": ray_facts(),
        **({"busy_port_holders": {str(p): w for p, w in holders.items()}} if holders else {}),
        **({"rtk_source": rtk} if rtk else {}),
        **({"container": container_facts(container)} if container else {}),
        # GPU settings an earlier run left (gpu_control.py's restore file): rtk up puts
        # them back before it starts Ray here.
        **({"gpu_restore_file": gpu_restore} if os.path.lexists(gpu_restore) else {}),
    }


def stop(marker_dir: str, grace_text: str) -> dict[str, Any]:
    """Stop this cluster's processes and remove MARKER_DIR.

    All but the GPU settings an earlier run left to put back (``GPU_RESTORE_FILE``):
    ``rtk up`` puts them back, or ``rtk profile --restore``.

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
    kept = os.path.join(marker_dir, GPU_RESTORE_FILE)
    if not left and os.path.lexists(kept):
        _remove_all_but(marker_dir, kept)  # for rtk up to put those GPU settings back
        return {"stopped": len(pids), "killed": killed, "left": left, "removed": False}
    if not left and os.path.isdir(marker_dir):
        shutil.rmtree(marker_dir, ignore_errors=True)
        removed = not os.path.exists(marker_dir)
    return {"stopped": len(pids), "killed": killed, "left": left, "removed": removed}


def _remove_all_but(directory: str, kept: str) -> None:
    """Remove everything under ``directory`` but the file ``kept`` (and its folders)."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if kept.startswith(path + os.sep):
            _remove_all_but(path, kept)
        elif path != kept:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)


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


def pack(run_dir: str, out_path: str, patterns_text: str) -> dict[str, Any]:
    """Pack the files of ``run_dir`` that ``patterns_text`` names into ``out_path`` (tar.gz).

    ``patterns_text`` is a comma list of globs under the run directory: rtk sends its
    pack list (``toolkit.rundir.pack.PACK_PATTERNS``: telemetry, markers, metrics and
    records, never checkpoints) on the command line (``ClusterPlan.pack_command``).
    Streams file by file to disk (the traces are already compressed: gzip level 1 is
    for the JSON files), so no run is ever held in memory; rtk then copies the archive
    in pieces and removes it.
    """
    import tarfile
    from pathlib import Path

    root = Path(os.path.expanduser(run_dir))
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory {root} on this node")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with tarfile.open(out, mode="w:gz", compresslevel=1) as tar:
        for pattern in (p for p in patterns_text.split(",") if p):
            for path in sorted(root.glob(pattern)):
                if path.is_file() and not path.name.endswith(".part"):
                    name = str(path.relative_to(root))
                    tar.add(path, arcname=name)
                    names.append(name)
    return {
        "run_dir": str(root),
        "files": names,
        "path": str(out),
        "size_bytes": out.stat().st_size,
    }


COMMANDS: dict[str, Callable[..., dict[str, Any]]] = {
    "probe": probe,
    "stop": stop,
    "status": status,
    "smoke": smoke,
    "pack": pack,
}


def main(argv: list[str]) -> int:
    """Run one command and print its JSON answer; exit 2 on bad usage, 3 on failure."""
    return run_command("agent", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
