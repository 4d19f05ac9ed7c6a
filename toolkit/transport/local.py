"""The local transport: the node is this machine; commands run as subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from toolkit.errors import TransportError
from toolkit.inventory import Node
from toolkit.transport.base import COPY_CHUNK_BYTES, CommandResult, Transport, partial_copy


def run_argv(
    node: Node,
    argv: list[str],
    command: str,
    env: Mapping[str, str] | None,
    stdin: str | None,
    timeout_s: float,
) -> CommandResult:
    """Run ``argv`` here for ``node``'s ``command`` and wait: the local and srun transports.

    Raises:
        TransportError: It ran past ``timeout_s`` or could not start.
    """
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise TransportError(
            f"{node.name}: command ran past its {timeout_s:g} s limit: {command[:200]}"
        ) from e
    except OSError as e:
        raise TransportError(f"{node.name}: cannot run {argv[0]}: {e}") from e
    return CommandResult(
        node=node.name,
        command=command,
        exit_code=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        duration_s=time.monotonic() - started,
    )


class LocalTransport(Transport):
    """Runs every node's commands on this machine with ``bash -c``."""

    name = "local"

    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        """Run ``command`` in bash on this machine (see ``Transport.run``)."""
        return run_argv(node, ["bash", "-c", command], command, env, stdin, timeout_s)

    def put(self, node: Node, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write the file atomically, with ``mode`` from its creation on."""
        target = Path(path)
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            try:
                os.fchmod(fd, mode)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(temp, target)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as e:
            raise TransportError(f"{node.name}: cannot write {path}: {e}") from e

    def get(self, node: Node, path: str, local: Path) -> int:
        """Copy the file on this machine, resuming a partial copy (see ``Transport.get``)."""
        partial, offset = partial_copy(local)
        try:
            with open(path, "rb") as source, partial.open("r+b" if offset else "wb") as out:
                size = os.fstat(source.fileno()).st_size
                offset = offset if offset <= size else 0
                source.seek(offset)
                out.seek(offset)
                out.truncate()
                shutil.copyfileobj(source, out, COPY_CHUNK_BYTES)
            os.replace(partial, local)
        except OSError as e:
            raise TransportError(f"{node.name}: cannot copy {path}: {e}") from e
        return local.stat().st_size
