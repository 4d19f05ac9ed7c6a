"""Can this machine run a sandbox? Linux, root, and the tools it calls."""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable, Mapping

from toolkit.errors import SandboxError

# Each tool the sandbox runs, with the Debian package that provides it.
TOOLS: dict[str, str] = {
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "tini": "tini",
}

# sshd and ip live in sbin directories, which a user's PATH may lack.
_SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Which = Callable[..., str | None]


def find_tools(
    which: Which = shutil.which, tools: Mapping[str, str] = TOOLS
) -> tuple[dict[str, str], list[str]]:
    """Resolve every tool in ``tools`` (default ``TOOLS``): (found name -> path, missing names)."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for tool in tools:
        path = which(tool) or which(tool, path=_SBIN_PATH)
        if path:
            found[tool] = path
        else:
            missing.append(tool)
    return found, missing


def check_host(
    euid: int | None = None, system: str | None = None, which: Which = shutil.which
) -> dict[str, str]:
    """Refuse, with what to do, unless this machine can create sandboxes.

    Args:
        euid: Effective user id to judge (default: this process's).
        system: Operating system name as ``platform.system()`` gives it (default: this one's).
        which: How to look a program up (``shutil.which``'s signature).

    Returns:
        Each tool's path, by name.

    Raises:
        SandboxError: Not Linux, not root, or a tool is missing (naming its Debian package).
    """
    system = platform.system() if system is None else system
    if system != "Linux":
        raise SandboxError(
            f"rtk sandbox needs Linux (network, PID, mount and UTS namespaces); this is {system}"
        )
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise SandboxError(
            "rtk sandbox needs root: it creates network namespaces, a bridge and veth pairs "
            "and mounts inside each node; run it as root (e.g. with sudo)"
        )
    found, missing = find_tools(which)
    if missing:
        packages = sorted({TOOLS[t] for t in missing})
        raise SandboxError(
            f"rtk sandbox needs {', '.join(missing)}, not found on PATH: install the Debian "
            f"package(s) {' '.join(packages)} (apt-get install {' '.join(packages)}) or run "
            "scripts/system-packages.sh"
        )
    return found
