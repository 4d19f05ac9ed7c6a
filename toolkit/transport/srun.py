"""The srun transport: commands run on the nodes of a SLURM allocation as job steps.

Each command is one ``srun --overlap`` step on one node, so it shares the node with
the steps already running there (Ray). Long-lived programs (``ray start --block``)
are spawned as steps that outlive the rtk command that started them: SLURM then
ends them itself on ``scancel`` or at the time limit, with everything they started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from toolkit.errors import SlurmError, TransportError
from toolkit.inventory import Node
from toolkit.shell import join
from toolkit.transport.base import CommandResult, Transport, partial_copy
from toolkit.transport.local import run_argv

SPAWN_POLL_S = 0.2


class SrunTransport(Transport):
    """Runs every node's commands as ``srun`` steps of job ``job_id``."""

    name = "srun"
    daemons_in_foreground = True

    def __init__(self, job_id: str, log_dir: Path) -> None:
        srun = shutil.which("srun")
        if srun is None:
            raise SlurmError("the srun transport needs srun on PATH (SLURM's client tools)")
        self.srun = srun
        self.job_id = job_id
        self.log_dir = log_dir

    def argv(self, node: Node, command: str, step_options: Sequence[str] = ()) -> list[str]:
        """The srun command line that runs shell ``command`` on ``node``.

        ``step_options`` go before the command (pyxis's ``--container-*``: the step,
        ``bash -c`` included, then runs in the container).
        """
        return [
            self.srun,
            f"--jobid={self.job_id}",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={node.name}",
            f"--job-name=rtk-{node.name}",
            "--chdir=/",
            "--quiet",
            *step_options,
            "bash",
            "-c",
            command,
        ]

    def run(
        self,
        node: Node,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        """Run ``command`` as one step on ``node`` (see ``Transport.run``)."""
        return run_argv(node, self.argv(node, command), command, env, stdin, timeout_s)

    def put(self, node: Node, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write the file from a step: temp file with ``mode``, then rename."""
        directory, _, name = path.rpartition("/")
        temp = f"{directory}/.{name}.rtk-tmp"
        script = (
            f"umask 077 && mkdir -p {join([directory or '/'])} && "
            f"cat > {join([temp])} && chmod {mode:o} {join([temp])} && "
            f"mv -f {join([temp, path])}"
        )
        try:
            done = subprocess.run(
                self.argv(node, script), input=data, capture_output=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TransportError(f"{node.name}: cannot write {path} with srun: {e}") from e
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()[-500:]
            raise TransportError(f"{node.name}: cannot write {path} with srun: {why}")

    def get(self, node: Node, path: str, local: Path) -> int:
        """Stream the file out of a step's stdout, resuming a partial copy."""
        partial, offset = partial_copy(local)
        script = f"tail -c +{offset + 1} {join([path])}"
        try:
            with partial.open("ab") as out:
                done = subprocess.run(
                    self.argv(node, script), stdout=out, stderr=subprocess.PIPE, timeout=3600
                )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TransportError(f"{node.name}: cannot copy {path} with srun: {e}") from e
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()[-500:]
            raise TransportError(f"{node.name}: cannot copy {path} with srun: {why}")
        os.replace(partial, local)
        return local.stat().st_size

    def start_daemon(
        self,
        node: Node,
        command: str,
        ready_text: str,
        timeout_s: float,
        *,
        step_options: Sequence[str] = (),
    ) -> CommandResult:
        """Start ``command`` as a step that keeps running; return once it prints ``ready_text``.

        Its output goes to a log file under ``log_dir`` (never a pipe: the step must
        outlive this process). A step that exits first, or is not ready in time
        (then it is stopped), gives a failed result with the log's tail.
        ``step_options`` are srun's for this step (``argv``).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{node.name}.log"
        started = time.monotonic()
        with log.open("wb") as out:
            process = subprocess.Popen(
                self.argv(node, command, step_options),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not stopped with rtk by Ctrl-C
            )
        while True:
            text = log.read_text(errors="replace")
            code = process.poll()
            if ready_text in text or code is not None:
                break
            if time.monotonic() - started > timeout_s:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
                code = 124
                text += f"\n(not ready after {timeout_s:g} s; stopped)"
                break
            time.sleep(SPAWN_POLL_S)
        if code == 0 and ready_text not in text:
            code = 1  # ended without ever being ready
        return CommandResult(
            node=node.name,
            command=command,
            exit_code=0 if code is None else code,
            stdout=text + f"\n(log: {log})",
            stderr="",
            duration_s=time.monotonic() - started,
        )
