"""What a Ray archive holds (its ``Manifest``), the names it uses, and its error."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

# What a Python cluster does without, with why (prefixes of paths in site-packages).
LEFT_OUT = {
    "ray/jars/": "Java workers and the Java driver API: a Python cluster never starts them",
}
MANIFEST = "RTK_ARCHIVE.json"
# Files of an installed copy's dist-info that describe that install, not Ray: dropped
# (RECORD, INSTALLER and the manifest are written anew).
INSTALL_METADATA = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", MANIFEST})
INSTALLER = "rtk-ray-archive\n"
SUFFIX = ".rtk.tar.xz"
# Beside the archive in the wheelhouse: the wheels of what Ray needs that the GPU image
# lacks (installed only with Ray, so apart from the wheelhouse's own wheels).
DEPS_DIR = "ray-deps"
# Longest interpreter path a shebang line may hold on Linux (a 128-byte buffer, less
# "#!" and the newline); a longer one, or one with spaces, goes through /bin/sh.
MAX_SHEBANG = 125


class RayArchiveError(Exception):
    """The archive cannot be built from that source, or installed there."""


@dataclass(frozen=True)
class LeftOut:
    """Files not packed, under one path prefix, and why."""

    prefix: str
    files: int
    size_bytes: int
    why: str


@dataclass(frozen=True)
class Manifest:
    """What an archive holds: which Ray, for which Pythons, what was left out.

    Attributes:
        name: The distribution (``ray``).
        version: Its version.
        tags: Its wheel tags (``cp312-cp312-linux_x86_64``): the Pythons it runs on.
        source: Where it was packed from (a wheel's file name, or ``installed``).
        files: Files packed, the dist-info's included.
        unpacked_bytes: Their total size.
        left_out: What was not packed, and why.
        level: The xz preset it was compressed with.
    """

    name: str
    version: str
    tags: tuple[str, ...]
    source: str
    files: int
    unpacked_bytes: int
    left_out: tuple[LeftOut, ...]
    level: int

    @property
    def dist_info(self) -> str:
        """The dist-info directory's name (``ray-2.60.0.dist-info``)."""
        return f"{self.name}-{self.version}.dist-info"

    def to_json(self) -> str:
        """The JSON text stored in the archive."""
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Read ``to_json``'s text back."""
        data = json.loads(text)
        data["tags"] = tuple(data["tags"])
        data["left_out"] = tuple(LeftOut(**d) for d in data["left_out"])
        return cls(**data)


def archive_name(manifest: Manifest) -> str:
    """The archive's file name: ``ray-2.60.0-cp312-cp312-linux_x86_64.rtk.tar.xz``."""
    return f"{manifest.name}-{manifest.version}-{manifest.tags[0]}{SUFFIX}"


def record_hash(data: bytes) -> str:
    """A RECORD file's hash field for ``data`` (``sha256=`` urlsafe base64, no padding)."""
    return hash_field(hashlib.sha256(data))


def hash_field(digest: hashlib._Hash) -> str:
    """A RECORD hash field from a finished sha256 object."""
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def safe_path(path: str) -> str:
    """``path`` if it is a plain relative path inside site-packages; else an error."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts or "\\" in path:
        raise RayArchiveError(f"refusing a path outside site-packages: {path!r}")
    return path


def describe(manifest: Manifest) -> list[str]:
    """Lines for a person: which Ray, how big unpacked, what was left out and why."""
    mib = manifest.unpacked_bytes / 2**20
    lines = [
        f"{manifest.name} {manifest.version} ({', '.join(manifest.tags)}) from {manifest.source}:"
        f" {manifest.files} files, {mib:.1f} MiB unpacked, xz level {manifest.level}"
    ]
    for left in manifest.left_out:
        lines.append(
            f"left out of the archive: {left.prefix} ({left.files} file{'s' * (left.files != 1)},"
            f" {left.size_bytes / 2**20:.1f} MiB): {left.why}"
        )
    return lines
