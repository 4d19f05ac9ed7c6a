"""Host key checking for SSH: known_hosts by default, accept-new only when asked.

Unknown keys are refused unless the inventory sets ``ssh.accept_new_host_keys``;
then they are appended to the known_hosts file (never rewritten: other entries and
other threads' additions stay). A changed key is always refused.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import paramiko

logger = logging.getLogger(__name__)

_APPEND_LOCK = threading.Lock()


class RejectUnknownHost(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Refuse hosts whose key is not in known_hosts, naming the file and the fix."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        """Refuse the connection."""
        raise paramiko.SSHException(
            f"host key of {hostname} is not in {self.known_hosts}; check it and add it "
            f"(ssh-keyscan {hostname.strip('[]').split(']:')[0]} >> {self.known_hosts}), or set "
            "ssh.accept_new_host_keys: true in the inventory"
        )


class AcceptNewHost(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Trust a host seen for the first time and append its key to known_hosts."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        """Record the key and go on."""
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _APPEND_LOCK:
            self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(line)
        logger.warning("added new host key for %s to %s", hostname, self.known_hosts)


def apply_host_key_policy(client: paramiko.SSHClient, known_hosts: Path, accept_new: bool) -> None:
    """Load ``known_hosts`` into ``client`` and set the policy for unknown keys."""
    if known_hosts.is_file():
        client.get_host_keys().load(str(known_hosts))
    policy: paramiko.MissingHostKeyPolicy = (
        AcceptNewHost(known_hosts) if accept_new else RejectUnknownHost(known_hosts)
    )
    client.set_missing_host_key_policy(policy)
