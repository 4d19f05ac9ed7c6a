"""Pack a node's Ray and rtk logs for a bug report: ``python - TEMP_DIR OUT MAX_BYTES SINCE_S``.

Run on a node with this file on stdin (``toolkit.nodeinfo.script.NodeScript``), so it
must work with only the standard library. It writes a tar.gz at OUT, file by file
(nothing whole in memory), and prints one JSON line: what it took and left out.

What it takes from the cluster's temp dir (Ray's ``--temp-dir``), in this order,
until MAX_BYTES of file content:

  rtk/...            rtk's own files on the node (the env file, GPU settings to put
                     back); never the token file, and the env file with the values
                     of secret-looking variables (``*TOKEN*``, ``*SECRET*``...) masked
  ray/SESSION/...    Ray's logs of each session (``session_*/logs``), newest first
  telemetry/KEY/...  the samplers' live traces (``rtk-telemetry-KEY``), newest first

The file that does not fit whole is cut to its last bytes that fit (a log's end is
what a bug report needs); those after it are left out. Files older than SINCE_S
seconds (0: none) are left out. ``COLLECTION.txt`` in the archive says what was
taken, cut and left out, and why. The cluster's token is masked wherever it appears
in a file, with as many ``*``, so sizes hold while the archive streams.
"""

from __future__ import annotations

import io
import os
import re
import socket
import stat
import sys
import tarfile
import time
from typing import Any, BinaryIO

from toolkit.node.common import UsageError, run_main

CHUNK_BYTES = 1 << 20
MIN_TAIL_BYTES = 64 << 10  # a cut file keeps at least this much, else it is left out
MAX_LISTED = 1000  # left-out files named in COLLECTION.txt; the rest are counted
MAX_ENV_FILE_BYTES = 1 << 20
TOKEN_FILE = "auth_token"
MIN_SECRET_CHARS = 8
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE_KEY", re.I)
NOT_SECRET_SUFFIXES = ("_PATH", "_FILE", "_DIR")
ENV_LINE = re.compile(rb"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class MaskedSlice:
    """``length`` bytes of a file from ``offset``, each secret replaced by ``*``s.

    Reads in chunks, with enough bytes either side of the slice that a secret cut by
    its edges is still found; hands out exactly ``length`` bytes, padded with NULs
    when the file shrank meanwhile (``short`` is then set).
    """

    def __init__(self, f: BinaryIO, offset: int, length: int, secrets: list[bytes]) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self.keep = max((len(s) for s in self.secrets), default=1) - 1
        start = max(0, offset - self.keep)
        f.seek(start)
        self.f = f
        self.skip = offset - start  # masked bytes before the slice, dropped
        self.want = length  # bytes of the slice still to hand out
        self.unread = self.skip + length + self.keep  # raw bytes still to read
        self.carry = b""  # the last bytes read, not yet checked against the next ones
        self.ready = bytearray()
        self.at = 0  # bytes of ``ready`` already handed out
        self.masked = 0
        self.short = False

    def _fill(self) -> bool:
        """Read and mask one more chunk; False at the end of what is to be read."""
        raw = self.f.read(min(CHUNK_BYTES, self.unread)) if self.unread else b""
        self.unread -= len(raw)
        data = self.carry + raw
        for secret in self.secrets:
            if secret in data:
                self.masked += data.count(secret)
                data = data.replace(secret, b"*" * len(secret))
        cut = len(data) if not raw else max(0, len(data) - self.keep)
        out, self.carry = data[:cut], data[cut:]
        if self.skip:
            dropped = min(self.skip, len(out))
            out, self.skip = out[dropped:], self.skip - dropped
        if self.at > CHUNK_BYTES:
            del self.ready[: self.at]
            self.at = 0
        self.ready += out
        return bool(raw)

    def read(self, size: int = -1) -> bytes:
        """The next ``size`` bytes of the slice (all that is left when negative)."""
        size = self.want if size < 0 else min(size, self.want)
        while len(self.ready) - self.at < size and self._fill():
            pass
        available = len(self.ready) - self.at
        if available < size:
            self.short = True
            self.ready += b"\0" * (size - available)
        out = bytes(self.ready[self.at : self.at + size])
        self.at += size
        self.want -= size
        return out


def mask_env_text(data: bytes) -> bytes:
    """An env file's text with the values of secret-looking variables masked."""
    lines = []
    for line in data.split(b"\n"):
        match = ENV_LINE.match(line)
        if match:
            name = match.group(2).decode()
            if SECRET_NAME.search(name) and not name.upper().endswith(NOT_SECRET_SUFFIXES):
                line = match.group(1) + match.group(2) + b"=<masked by rtk>"
        lines.append(line)
    return b"\n".join(lines)


def _files_under(root: str, prefix: str) -> list[tuple[str, str, os.stat_result]]:
    """Regular files below ``root`` (no links followed): (path, archive name, stat)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                rel = os.path.relpath(path, root)
                found.append((path, f"{prefix}/{rel}", info))
    return found


def candidates(temp_dir: str) -> tuple[list[tuple[str, str, os.stat_result]], list[str]]:
    """The files to take in order, and the token files never taken (archive names)."""
    rtk_files = _files_under(os.path.join(temp_dir, "rtk"), "rtk")
    tokens = [name for path, name, _ in rtk_files if os.path.basename(path) == TOKEN_FILE]
    rtk_files = [f for f in rtk_files if os.path.basename(f[0]) != TOKEN_FILE]
    ray_files, traces = [], []
    for entry in sorted(os.listdir(temp_dir)):
        path = os.path.join(temp_dir, entry)
        if os.path.islink(path) or not os.path.isdir(path):
            continue  # session_latest is a link to one of the sessions
        if entry.startswith("session_"):
            ray_files += _files_under(os.path.join(path, "logs"), f"ray/{entry}")
        elif entry.startswith("rtk-telemetry-"):
            traces += _files_under(path, f"telemetry/{entry[len('rtk-telemetry-') :]}")
    for files in (ray_files, traces):
        files.sort(key=lambda f: f[2].st_mtime, reverse=True)
    return rtk_files + ray_files + traces, tokens


def _secrets(temp_dir: str) -> list[bytes]:
    """The cluster's token as it could appear in a log (the file's, the environment's)."""
    found = []
    try:
        with open(os.path.join(temp_dir, "rtk", TOKEN_FILE), "rb") as f:
            found.append(f.read(4096).strip())
    except OSError:
        pass
    found.append(os.environ.get("RAY_AUTH_TOKEN", "").encode())
    return [s for s in found if len(s) >= MIN_SECRET_CHARS]


def _member(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    return info


def pack(temp_dir: str, out_path: str, max_text: str, since_text: str = "0") -> dict[str, Any]:
    """Pack the node's logs into ``out_path`` (see the module's docstring)."""
    max_bytes = int(max_text)
    since_s = float(since_text)
    if not os.path.isdir(temp_dir):
        raise FileNotFoundError(f"no {temp_dir} on this node: is the cluster up (rtk up)?")
    files, tokens = candidates(temp_dir)
    secrets = _secrets(temp_dir)
    cutoff = time.time() - since_s if since_s > 0 else None
    taken = taken_bytes = masked_files = 0
    budget = max_bytes
    cut: list[str] = []
    changed: list[str] = []
    left: list[tuple[str, int, str]] = [
        (name, 0, "the cluster's token, never taken") for name in tokens
    ]
    with tarfile.open(out_path, mode="w:gz", compresslevel=1) as tar:
        for path, name, info in files:
            if cutoff is not None and info.st_mtime < cutoff:
                left.append((name, info.st_size, "older than --since"))
                continue
            if budget < min(info.st_size, MIN_TAIL_BYTES) or (budget <= 0 and info.st_size):
                left.append((name, info.st_size, "over the cap"))
                continue
            try:
                with open(path, "rb") as f:
                    source: BinaryIO = f
                    size = os.fstat(f.fileno()).st_size
                    if name.startswith("rtk/") and name.endswith(".env"):
                        masked_text = mask_env_text(f.read(MAX_ENV_FILE_BYTES))
                        source, size = io.BytesIO(masked_text), len(masked_text)
                    length = min(size, budget)
                    if length < size:
                        cut.append(f"{name}: the last {length} of {size} bytes")
                    reader = MaskedSlice(source, size - length, length, secrets)
                    tar.addfile(_member(name, length, info.st_mtime), reader)
            except OSError as e:
                left.append((name, info.st_size, f"unreadable: {e.strerror or e}"))
                continue
            if reader.short:
                changed.append(name)
            masked_files += reader.masked > 0
            taken += 1
            taken_bytes += length
            budget -= length
        note = _note(max_bytes, since_s, taken, taken_bytes, cut, changed, masked_files, left)
        tar.addfile(_member("COLLECTION.txt", len(note), time.time()), io.BytesIO(note))
    return {
        "hostname": socket.gethostname(),
        "path": out_path,
        "size_bytes": os.path.getsize(out_path),
        "files": taken,
        "file_bytes": taken_bytes,
        "cut": cut,
        "changed": changed,
        "masked_files": masked_files,
        "left_out": sum(1 for _, size, why in left if not why.startswith("the cluster's token")),
        "left_out_bytes": sum(size for _, size, _ in left),
        "left_out_reasons": _counts(why.split(":")[0] for _, _, why in left),
    }


def _counts(reasons: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return counts


def _note(
    max_bytes: int,
    since_s: float,
    taken: int,
    taken_bytes: int,
    cut: list[str],
    changed: list[str],
    masked_files: int,
    left: list[tuple[str, int, str]],
) -> bytes:
    """COLLECTION.txt: what was taken, cut and left out, and why."""
    since = f"the last {since_s:g} s" if since_s > 0 else "any time"
    lines = [
        f"rtk logs of {socket.gethostname()}, packed {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
        f"cap: {max_bytes} bytes of files; modified: {since}",
        f"taken: {taken} files, {taken_bytes} bytes; the cluster's token masked in "
        f"{masked_files} of them",
    ]
    lines += [f"cut to its end: {c}" for c in cut]
    lines += [f"changed while read (padded with NUL): {c}" for c in changed]
    lines.append(f"left out: {len(left)} files, {sum(s for _, s, _ in left)} bytes")
    lines += [f"  {name}  {size} bytes  {why}" for name, size, why in left[:MAX_LISTED]]
    if len(left) > MAX_LISTED:
        lines.append(f"  and {len(left) - MAX_LISTED} more")
    return ("\n".join(lines) + "\n").encode()


def main(argv: list[str]) -> int:
    """Pack and print the JSON answer; exit 2 on bad usage, 3 on failure."""

    def call() -> dict[str, Any]:
        if len(argv) not in (3, 4):
            raise UsageError("logpack TEMP_DIR OUT_PATH MAX_BYTES [SINCE_S]")
        return pack(*argv)

    return run_main(call)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
