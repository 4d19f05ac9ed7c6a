"""Stand-in programs on PATH (``journalctl``, ``dmesg``, ``dcgmi``) for the node scripts.

Each is a real executable shell script in a folder the test puts first (or alone) on
PATH: it records its arguments, prints the text it was given on stdout and stderr,
and exits with the status given, so the script under test runs it as a real
subprocess. The script uses shell builtins only, so it works with PATH holding
nothing but its own folder (how a test makes the real programs absent).
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

# Found once, at import: tests then set PATH to their own folder.
SLEEP = shutil.which("sleep") or "/bin/sleep"


def fake_program(
    bin_dir: Path,
    name: str,
    stdout: str = "",
    stderr: str = "",
    exit_code: int = 0,
    sleep_s: float = 0.0,
) -> Path:
    """Write ``bin_dir/name``; its arguments land in ``bin_dir/name.args``, one a line.

    Args:
        bin_dir: The folder (created if needed).
        name: The program's name.
        stdout: What it prints on stdout.
        stderr: What it prints on stderr.
        exit_code: Its exit status.
        sleep_s: Seconds it sleeps first (the real ``sleep``, by its full path).
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    out = bin_dir / f"{name}.stdout"
    err = bin_dir / f"{name}.stderr"
    out.write_text(stdout)
    err.write_text(stderr)
    args = bin_dir / f"{name}.args"
    lines = [
        "#!/bin/sh",
        f'printf "%s\\n" "$@" > {shlex.quote(str(args))}',
        f"{shlex.quote(SLEEP)} {sleep_s:g}" if sleep_s > 0 else ":",
        'while IFS= read -r line || [ -n "$line" ]; do printf "%s\\n" "$line"; done'
        f" < {shlex.quote(str(out))}",
        'while IFS= read -r line || [ -n "$line" ]; do printf "%s\\n" "$line" >&2; done'
        f" < {shlex.quote(str(err))}",
        f"exit {exit_code}",
    ]
    path = bin_dir / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def args_of(bin_dir: Path, name: str) -> list[str]:
    """The arguments the fake ``name`` was last run with (it must have run)."""
    return (bin_dir / f"{name}.args").read_text().splitlines()
