"""The transport interface: run a command on a node, put a file on it, get one from it.

Implementations: ``local`` (this machine, subprocess), ``ssh`` (fabric), ``srun``
(inside a SLURM allocation). Commands are shell text built from quoted values
(``toolkit.shell``); secrets travel with ``put`` or stdin, never on a command line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from toolkit.errors import TransportError
from toolkit.inventory import Node

COPY_CHUNK_BYTES = 1 << 20  # what ``get`` holds of a file at a time


@dataclass(frozen=True)
class CommandResult:
    """What one command did on one node."""

    node: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0

    def tail(self, lines: int = 12) -> str:
        """The last lines of stderr and stdout, for error messages."""
        text = "\n".join(part for part in (self.stdout.rstrip(), self.stderr.rstrip()) if part)
        return "\n".join(text.splitlines()[-lines:])


class Transport(ABC):
    """Runs commands and writes files on nodes; one instance serves a whole cluster."""

    name: str = "transport"
    # True when a long-lived command must stay in the foreground, because everything
    # a command started ends with it (srun: a job step's processes end with the step).
    daemons_in_foreground: bool = False

    @abstractmethod
    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        """Run shell ``command`` on ``node`` and wait for it.

        Args:
            node: Where to run it.
            command: Shell text; every inventory value in it is already quoted.
            env: Extra environment variables for the command.
            stdin: Text fed to the command's standard input.
            timeout_s: Limit for the whole command.

        Returns:
            The exit code and output; a non-zero exit is a result, not an error.

        Raises:
            toolkit.errors.TransportError: The node could not be reached, or the
                command ran past ``timeout_s``.
        """

    @abstractmethod
    def put(self, node: Node, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write ``data`` to ``path`` on ``node`` with ``mode``, creating parents as 0700.

        Raises:
            toolkit.errors.TransportError: The file could not be written.
        """

    @abstractmethod
    def get(self, node: Node, path: str, local: Path) -> int:
        """Copy ``path`` on ``node`` to ``local`` here, streaming; returns its size.

        Never holds the file in memory. The copy goes to ``local`` + ``.part`` and is
        renamed when complete; a ``.part`` left by an interrupted copy is resumed.

        Raises:
            toolkit.errors.TransportError: The file could not be read or written.
        """

    def start_daemon(
        self,
        node: Node,
        command: str,
        ready_text: str,
        timeout_s: float,
        *,
        step_options: Sequence[str] = (),
    ) -> CommandResult:
        """Start long-lived ``command`` on ``node``; return once it is running.

        By default the command puts itself in the background (``ray start``) and this
        waits for it to exit. Transports whose processes end with the command that
        started them (``daemons_in_foreground``) keep it running in the foreground
        instead and return once it prints ``ready_text``.

        Args:
            node: Where to start it.
            command: Shell text.
            ready_text: What it prints once running (foreground daemons).
            timeout_s: Limit for the start.
            step_options: Options of the job step that runs it (srun's, such as
                pyxis's ``--container-image``); only the srun transport takes any.

        Returns:
            A failed result when it exited with an error, or was not ready within
            ``timeout_s`` (then it is stopped).

        Raises:
            toolkit.errors.TransportError: The node could not be reached, or
                ``step_options`` were given to a transport without job steps.
        """
        if step_options:
            raise TransportError(
                f"{node.name}: the {self.name} transport runs no job steps, so it cannot "
                f"take srun's options {' '.join(step_options)}; they need --slurm"
            )
        return self.run(node, command, timeout_s=timeout_s)

    def close(self) -> None:
        """Release connections; the default holds none."""
        return None

    def __enter__(self) -> Transport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def partial_copy(local: Path) -> tuple[Path, int]:
    """Where a copy to ``local`` is written until complete, and how much is there."""
    partial = local.with_name(local.name + ".part")
    local.parent.mkdir(parents=True, exist_ok=True)
    return partial, partial.stat().st_size if partial.exists() else 0
