"""Reaching nodes over real SSH: keys, the client command line, waiting for logins."""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from toolkit.errors import SandboxError

logger = logging.getLogger(__name__)


def keygen(path: Path, comment: str, ssh_keygen: str = "ssh-keygen") -> str:
    """Create an ed25519 key pair without passphrase at ``path``; return the public line.

    Raises:
        SandboxError: ssh-keygen failed.
    """
    argv = [ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise SandboxError(f"ssh-keygen for {path} failed: {done.stderr.strip()}")
    return path.with_name(path.name + ".pub").read_text(encoding="utf-8").strip()


def ssh_argv(
    address: str, key: Path, known_hosts: Path, *remote: str, connect_timeout_s: float = 5.0
) -> list[str]:
    """The ssh command line that logs in as root with only the sandbox's key and host keys."""
    return [
        "ssh", "-F", "none",
        "-o", "BatchMode=yes",
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"ConnectTimeout={connect_timeout_s:g}",
        "-o", "LogLevel=ERROR",
        "-i", str(key),
        "-p", "22",
        f"root@{address}",
        *remote,
    ]  # fmt: skip


def port_open(address: str, port: int = 22, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to ``address:port`` from here succeeds."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for_login(
    name: str,
    address: str,
    key: Path,
    known_hosts: Path,
    timeout_s: float,
    alive: Callable[[], str | None] = lambda: None,
) -> float:
    """Wait until ``ssh root@address hostname`` prints ``name``; return the seconds waited.

    Args:
        name: The node's expected host name.
        address: Its address.
        key: Client private key.
        known_hosts: The known_hosts file with its host key.
        timeout_s: How long to wait.
        alive: Returns why the node cannot come up any more (its init ended), or None.

    Raises:
        SandboxError: The node's init ended, or no login succeeded in time.
    """
    began = time.monotonic()
    deadline = began + timeout_s
    last = "sshd is not listening"
    while time.monotonic() < deadline:
        dead = alive()
        if dead:
            raise SandboxError(f"{name}: {dead}")
        if port_open(address, 22, timeout_s=0.5):
            argv = ssh_argv(address, key, known_hosts, "hostname", connect_timeout_s=3)
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
            except subprocess.TimeoutExpired:
                last = "ssh hung for 10 s"
            else:
                if done.returncode == 0 and done.stdout.strip() == name:
                    return time.monotonic() - began
                last = done.stderr.strip() or f"hostname printed {done.stdout.strip()!r}"
        time.sleep(0.05)
    raise SandboxError(
        f"{name}: no SSH login to root@{address} within {timeout_s:g} s (last: {last})"
    )
