"""The SSH transport: fabric connections, one per node, reused for every step.

Commands run in channels of that one connection (``bash -c``, stdin fed and closed,
stdout and stderr read to the end or until the per-command time limit). Files are
written over SFTP on the same connection, so secrets never reach a command line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

import fabric
import paramiko

from toolkit.errors import TransportError
from toolkit.inventory import Node
from toolkit.shell import join, quote
from toolkit.transport.base import COPY_CHUNK_BYTES, CommandResult, Transport, partial_copy
from toolkit.transport.hostkeys import apply_host_key_policy
from toolkit.transport.pool import ConnectionPool

READ_CHUNK = 65536
# What paramiko says when the port answered, but not as an SSH server: it closed
# without a word, or said something else (an HTTP server, a database).
NOT_SSH = ("Error reading SSH protocol banner", "Indecipherable protocol version")

# paramiko's own thread logs every failed handshake with its traceback, which Python
# prints when nothing else handles logging; rtk raises its own error for it instead.
# Logging set up by a program that uses rtk still receives those records.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SshTransport(Transport):
    """Runs commands on nodes over SSH, with keys, jump hosts and host key checks."""

    name = "ssh"

    def __init__(self) -> None:
        self._pool: ConnectionPool[fabric.Connection] = ConnectionPool(
            self._open, is_open=lambda connection: bool(connection.is_connected)
        )

    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        """Run ``command`` with bash on ``node`` (see ``Transport.run``)."""
        prefix = join(["env", *(f"{k}={v}" for k, v in env.items())]) + " " if env else ""
        # --norc: bash started by sshd would read ~/.bashrc again (pyenv or conda init
        # there cost ~80 ms per command); the login shell around it already did.
        remote = f"{prefix}bash --norc --noprofile -c {quote(command)}"
        data = stdin.encode() if stdin is not None else b""
        code, out, err, took = self._exec(node, remote, data, timeout_s)
        return CommandResult(
            node.name,
            command,
            code,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            took,
        )

    def put(self, node: Node, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write the file over SFTP (no shell started): temp file, chmod, then rename."""
        directory, _, name = path.rpartition("/")
        temp = f"{directory}/.{name}.rtk-tmp"
        try:
            sftp = self._sftp(node)
            _makedirs(sftp, directory or "/")
            with sftp.open(temp, "wb") as f:
                sftp.chmod(temp, mode)
                f.write(data)
            sftp.posix_rename(temp, path)
        except (OSError, paramiko.SSHException, EOFError) as e:
            raise TransportError(f"{node.name}: cannot write {path} over SFTP: {e}") from e

    def get(self, node: Node, path: str, local: Path) -> int:
        """Stream the file over SFTP, resuming a partial copy (see ``Transport.get``)."""
        partial, offset = partial_copy(local)
        try:
            sftp = self._sftp(node)
            size = int(sftp.stat(path).st_size or 0)
            offset = offset if offset <= size else 0
            with sftp.open(path, "rb") as source, partial.open("r+b" if offset else "wb") as out:
                source.seek(offset)
                source.prefetch(size - offset)
                out.seek(offset)
                out.truncate()
                while chunk := source.read(COPY_CHUNK_BYTES):
                    out.write(chunk)
            os.replace(partial, local)
        except (OSError, paramiko.SSHException, EOFError) as e:
            raise TransportError(f"{node.name}: cannot copy {path} over SFTP: {e}") from e
        return local.stat().st_size

    def _sftp(self, node: Node) -> paramiko.SFTPClient:
        connection = self._pool.get(node)
        with self._pool.node_lock(node):
            return connection.sftp()

    def close(self) -> None:
        """Close every connection (and its jump host's)."""
        for connection in self._pool.drain():
            gateway = connection.gateway
            connection.close()
            if isinstance(gateway, fabric.Connection):
                gateway.close()

    def _exec(
        self, node: Node, remote: str, data: bytes, timeout_s: float
    ) -> tuple[int, bytes, bytes, float]:
        began = time.monotonic()
        connection = self._pool.get(node)
        try:
            channel = connection.client.get_transport().open_session(timeout=timeout_s)
            channel.exec_command(remote)
            if data:
                channel.sendall(data)
            channel.shutdown_write()
            out, err = _drain(channel, began + timeout_s)
        except TimeoutError as e:
            raise TransportError(
                f"{node.name}: command ran past its {timeout_s:g} s limit: {remote[:200]}"
            ) from e
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._forget(node)
            raise TransportError(f"{node.name}: SSH session to {node.address} failed: {e}") from e
        code = channel.recv_exit_status()
        channel.close()
        return code, out, err, time.monotonic() - began

    def _open(self, node: Node) -> fabric.Connection:
        ssh = node.ssh
        known_hosts = Path(ssh.known_hosts)
        gateway = None
        if ssh.jump_host:
            gateway = fabric.Connection(
                ssh.jump_host,
                connect_timeout=int(ssh.connect_timeout_s),
                connect_kwargs=_auth(ssh.key_file),
            )
            apply_host_key_policy(gateway.client, known_hosts, ssh.accept_new_host_keys)
        connection = fabric.Connection(
            node.address,
            user=ssh.user,
            port=ssh.port,
            gateway=gateway,
            connect_timeout=max(1, int(ssh.connect_timeout_s)),
            connect_kwargs=_auth(ssh.key_file),
        )
        apply_host_key_policy(connection.client, known_hosts, ssh.accept_new_host_keys)
        via = f" via {ssh.jump_host}" if ssh.jump_host else ""
        target = f"{ssh.user}@{node.address}:{ssh.port}{via}"
        try:
            connection.open()
        except paramiko.BadHostKeyException as e:
            raise TransportError(
                f"{node.name}: host key of {node.address} does not match "
                f"{known_hosts}: it changed, or someone is in between; "
                "refusing to connect"
            ) from e
        except paramiko.AuthenticationException as e:
            key = f" with key {ssh.key_file}" if ssh.key_file else ""
            raise TransportError(
                f"{node.name}: SSH login as {ssh.user}{key} refused by {target}: {e}"
            ) from e
        except (paramiko.SSHException, EOFError) as e:
            if str(e).startswith(NOT_SSH):
                raise TransportError(_not_ssh(node, target, str(e))) from e
            raise TransportError(f"{node.name}: SSH to {target} failed: {e}") from e
        except TimeoutError as e:
            raise TransportError(
                f"{node.name}: SSH to {target} timed out after {ssh.connect_timeout_s:g} s"
            ) from e
        except OSError as e:
            raise TransportError(
                f"{node.name}: cannot connect to {target}: {e.strerror or e}"
            ) from e
        return connection

    def _forget(self, node: Node) -> None:
        connection = self._pool.forget(node)
        if connection is not None:
            connection.close()


def _not_ssh(node: Node, target: str, why: str) -> str:
    """What a port that took the connection but is no SSH server means, and what to check."""
    ssh = node.ssh
    for prefix in NOT_SSH:  # paramiko runs its words and the cause together
        if why.startswith(prefix) and why[len(prefix) :][:1] not in ("", " ", ":"):
            why = f"{prefix}: {why[len(prefix) :]}"
    hop = " (or the jump host's)" if ssh.jump_host else ""
    return (
        f"{node.name}: no SSH server at {target}: the port{hop} took the connection but "
        f"did not speak SSH ({why}). Check {node.name}'s address and ssh.port in the "
        f"inventory ({node.address}, port {ssh.port}): they must reach the node's sshd "
        "(port 22 unless its sshd_config says otherwise)."
    )


def _makedirs(sftp: paramiko.SFTPClient, directory: str) -> None:
    """``mkdir -p`` over SFTP; new directories get mode 0700."""
    missing: list[str] = []
    current = directory
    while current not in ("", "/"):
        try:
            sftp.stat(current)
            break
        except FileNotFoundError:
            missing.append(current)
            current = current.rsplit("/", 1)[0]
    for path in reversed(missing):
        sftp.mkdir(path, mode=0o700)


def _auth(key_file: str | None) -> dict[str, object]:
    if key_file:
        return {"key_filename": [key_file], "look_for_keys": False}
    return {}


def _drain(channel: paramiko.Channel, deadline: float) -> tuple[bytes, bytes]:
    """Read stdout and stderr until the command exits; TimeoutError past ``deadline``."""
    out: list[bytes] = []
    err: list[bytes] = []
    while True:
        busy = False
        if channel.recv_ready():
            out.append(channel.recv(READ_CHUNK))
            busy = True
        if channel.recv_stderr_ready():
            err.append(channel.recv_stderr(READ_CHUNK))
            busy = True
        if not busy:
            if (
                channel.exit_status_ready()
                and not channel.recv_ready()
                and not channel.recv_stderr_ready()
            ):
                break
            if time.monotonic() > deadline:
                channel.close()
                raise TimeoutError
            time.sleep(0.005)
    return b"".join(out), b"".join(err)
