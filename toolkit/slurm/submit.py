"""Submit a batch script with ``sbatch`` and follow the job to its end.

``follow`` prints the job's output file as it grows and polls
``scontrol show job -o`` until a terminal state. A job that ended long enough ago
has left ``scontrol`` (SLURM's MinJobAge); then ``sacct`` is asked, and where there
is no accounting either the outcome is reported as unknown, never guessed.
"""

from __future__ import annotations

import codecs
import getpass
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from toolkit.errors import SlurmError

log = logging.getLogger(__name__)

TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
UNKNOWN = "UNKNOWN"
SUBMIT_TIMEOUT_S = 60.0
QUERY_TIMEOUT_S = 30.0
# Polls in a row in which neither scontrol nor sacct knows the job before giving up.
UNKNOWN_POLLS = 5


@dataclass(frozen=True)
class JobState:
    """What SLURM says about one job.

    Attributes:
        job_id: The job id.
        state: ``JobState`` (RUNNING, COMPLETED, ...), or UNKNOWN when SLURM has
            forgotten the job.
        exit_code: The batch script's exit code, once known.
        signal: The signal that ended it (``ExitCode=0:15``), 0 when none.
        stdout_path: The job's output file as SLURM expanded it, when known.
        reason: SLURM's ``Reason`` (why pending, or why it ended), when known.
        source: ``scontrol``, ``sacct`` or ``none``.
    """

    job_id: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    stdout_path: str | None = None
    reason: str | None = None
    source: str = "scontrol"

    @property
    def terminal(self) -> bool:
        """True once the job has ended (or is unknown, so nothing more will come)."""
        return self.state in TERMINAL_STATES or self.state == UNKNOWN

    def describe(self) -> str:
        """One phrase: ``COMPLETED, exit code 0`` or ``CANCELLED, signal 15``."""
        if self.state == UNKNOWN:
            return "ended, outcome unknown: scontrol forgot it and sacct has no record"
        parts = [self.state]
        if self.signal:
            parts.append(f"signal {self.signal}")
        elif self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.reason and self.reason != "None":
            parts.append(f"reason {self.reason}")
        return ", ".join(parts)


def exit_status(state: JobState) -> int:
    """The exit status for rtk: 0 when COMPLETED, else the job's code, 128+signal, or 1."""
    if state.state == "COMPLETED" and not state.exit_code:
        return 0
    if state.exit_code:
        return state.exit_code
    if state.signal:
        return 128 + state.signal
    return 1


def submit(
    script: str,
    env: Mapping[str, str] | None = None,
    sbatch: str = "sbatch",
    timeout_s: float = SUBMIT_TIMEOUT_S,
) -> str:
    """Submit ``script`` (on sbatch's stdin) from the current directory; return the job id.

    Raises:
        SlurmError: sbatch is not on PATH, refused the job, or did not answer.
    """
    exe = shutil.which(sbatch)
    if exe is None:
        raise SlurmError(
            f"{sbatch} is not on PATH: run rtk sbatch submit on a SLURM login node, or "
            "write the script with rtk sbatch render INVENTORY -o job.sbatch and sbatch it there"
        )
    try:
        done = subprocess.run(
            [exe, "--parsable"],
            input=script,
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"sbatch did not answer within {timeout_s:g} s") from e
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise SlurmError(f"sbatch refused the job: {why}")
    return parse_submit_output(done.stdout)


def parse_submit_output(text: str) -> str:
    """The job id from ``sbatch --parsable`` output (``12345`` or ``12345;cluster``).

    Raises:
        SlurmError: No job id in the output.
    """
    for line in text.splitlines():
        job_id = line.strip().split(";", 1)[0]
        if job_id.isdigit():
            return job_id
    raise SlurmError(f"sbatch printed no job id: {text.strip()!r}")


def _field(line: str, key: str) -> str | None:
    """The value of ``key=`` in a ``scontrol -o`` line; not ``DerivedExitCode`` for ExitCode."""
    match = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", line)
    return match.group(1) if match else None


def _exit_code(text: str | None) -> tuple[int | None, int | None]:
    match = re.fullmatch(r"(\d+):(\d+)", text or "")
    if not match:
        return None, None
    return int(match.group(1)), int(match.group(2))


def parse_scontrol_job(text: str, job_id: str) -> JobState | None:
    """The job's state from ``scontrol show job -o JOBID`` output, None if absent."""
    for line in text.splitlines():
        if _field(line, "JobId") != job_id:
            continue
        state = _field(line, "JobState") or UNKNOWN
        exit_code, signal = _exit_code(_field(line, "ExitCode"))
        # StdOut may hold spaces: take everything up to the next " Key=".
        stdout = re.search(r"(?:^|\s)StdOut=(.*?)(?=\s[A-Za-z/:]+=|$)", line)
        return JobState(
            job_id=job_id,
            state=state,
            exit_code=exit_code,
            signal=signal,
            stdout_path=stdout.group(1) if stdout and stdout.group(1) else None,
            reason=_field(line, "Reason"),
            source="scontrol",
        )
    return None


def parse_sacct(text: str, job_id: str) -> JobState | None:
    """The job's state from ``sacct -X -n -P -o JobID,State,ExitCode`` output."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or parts[0] != job_id:
            continue
        state = parts[1].split()[0] if parts[1].strip() else UNKNOWN
        exit_code, signal = _exit_code(parts[2])
        return JobState(job_id, state, exit_code, signal, source="sacct")
    return None


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """Run a SLURM query; None when the tool is not on PATH or did not answer."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        return subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log.warning("%s did not answer within %s s", argv[0], QUERY_TIMEOUT_S)
        return None


def query_job(job_id: str) -> JobState | None:
    """Ask scontrol about the job, then sacct; None when neither knows it.

    Raises:
        SlurmError: Neither scontrol nor sacct is on PATH.
    """
    shown = _run(["scontrol", "show", "job", "-o", job_id])
    if shown is not None and shown.returncode == 0:
        state = parse_scontrol_job(shown.stdout, job_id)
        if state is not None:
            return state
    accounted = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,ExitCode"])
    if shown is None and accounted is None:
        raise SlurmError("neither scontrol nor sacct is on PATH: cannot follow the job")
    if accounted is not None and accounted.returncode == 0:
        return parse_sacct(accounted.stdout, job_id)
    return None


class _Tail:
    """Echo what was appended to a file since the last look (the file may not exist yet)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.offset_bytes = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump(self, echo: Callable[[str], None], final: bool = False) -> None:
        data = b""
        if self.path is not None:
            try:
                with open(self.path, "rb") as file:
                    file.seek(self.offset_bytes)
                    data = file.read()
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("cannot read %s: %s", self.path, e)
        self.offset_bytes += len(data)
        text = self._decoder.decode(data, final=final)
        if text:
            echo(text)


def follow(
    job_id: str,
    output_path: str | None,
    echo: Callable[[str], None],
    poll_s: float = 2.0,
    query: Callable[[str], JobState | None] = query_job,
    sleep: Callable[[float], None] = time.sleep,
) -> JobState:
    """Echo the job's output as it grows until the job ends; return its final state.

    Args:
        job_id: The job to follow.
        output_path: Its output file, used until scontrol names one (StdOut=).
        echo: Receives each new piece of output text.
        poll_s: Seconds between polls.
        query: How to ask SLURM (``query_job``; tests pass their own).
        sleep: How to wait between polls.

    Returns:
        The terminal state, or one with state UNKNOWN when SLURM lost track of the job.
    """
    tail = _Tail(output_path)
    unknown_polls = 0
    while True:
        state = query(job_id)
        if state is None:
            unknown_polls += 1
            if unknown_polls >= UNKNOWN_POLLS:
                tail.pump(echo, final=True)
                return JobState(job_id, UNKNOWN, source="none")
        else:
            unknown_polls = 0
            if state.stdout_path and tail.offset_bytes == 0:
                tail.path = state.stdout_path
        tail.pump(echo, final=state is not None and state.terminal)
        if state is not None and state.terminal:
            return state
        sleep(poll_s)


def expand_output_pattern(pattern: str, job_id: str, job_name: str, user: str | None = None) -> str:
    """Fill in sbatch's ``--output`` pattern: %j %J %A %x %u %% (with %Nj zero padding).

    Patterns this cannot know (%N node, %a array index...) stay as they are.
    """
    user = user if user is not None else getpass.getuser()

    def fill(match: re.Match[str]) -> str:
        width, letter = match.group(1), match.group(2)
        value = {"j": job_id, "J": job_id, "A": job_id, "x": job_name, "u": user}.get(letter)
        if letter == "%":
            return "%"
        if value is None:
            return match.group(0)
        return value.zfill(int(width)) if width and letter in "jJA" else value

    return re.sub(r"%(\d*)([A-Za-z%])", fill, pattern)
