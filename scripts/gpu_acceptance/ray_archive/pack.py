"""Pack Ray, from its wheel or an installed copy, into one xz tarball (``build``)."""

from __future__ import annotations

import csv
import hashlib
import io
import lzma
import tarfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpu_acceptance.ray_archive.manifest import (
    INSTALL_METADATA,
    INSTALLER,
    LEFT_OUT,
    MANIFEST,
    LeftOut,
    Manifest,
    RayArchiveError,
    hash_field,
    record_hash,
    safe_path,
)


@dataclass(frozen=True)
class _Entry:
    path: str  # relative to site-packages, POSIX separators
    size: int
    executable: bool
    mtime: float
    open: Callable[[], IO[bytes]]


def _wheel_entries(wheel: Path, zf: zipfile.ZipFile) -> list[_Entry]:
    entries = []
    for info in zf.infolist():
        if info.is_dir():
            continue
        if info.filename.split("/", 1)[0].endswith(".data"):
            raise RayArchiveError(f"{wheel.name}: has {info.filename}; .data/ is not supported")
        entries.append(
            _Entry(
                path=safe_path(info.filename),
                size=info.file_size,
                executable=bool((info.external_attr >> 16) & 0o111),
                mtime=time.mktime((*info.date_time, 0, 0, -1)),
                open=lambda name=info.filename: zf.open(name),  # type: ignore[misc]
            )
        )
    return entries


def _installed_entries(dist_info: Path) -> list[_Entry]:
    """The files RECORD lists under site-packages (scripts elsewhere and .pyc skipped)."""
    record = dist_info / "RECORD"
    if not record.is_file():
        raise RayArchiveError(f"{dist_info}: no RECORD; not an installed distribution")
    entries = []
    with record.open(newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if not row or row[0].startswith(("../", "/")) or row[0].endswith(".pyc"):
                continue
            path = safe_path(row[0])
            full = dist_info.parent / path
            try:
                st = full.stat()
            except OSError as e:
                raise RayArchiveError(f"{full}: listed in RECORD but unreadable: {e}") from e
            entries.append(
                _Entry(path, st.st_size, bool(st.st_mode & 0o111), st.st_mtime, _opener(full))
            )
    return entries


def _opener(path: Path) -> Callable[[], IO[bytes]]:
    return lambda: path.open("rb")


def _installed_dist_info(directory: Path) -> Path:
    """``directory`` itself when it is Ray's dist-info, else the one it holds."""
    if directory.name.endswith(".dist-info"):
        return directory
    found = sorted(directory.glob("ray-*.dist-info"))
    if len(found) != 1:
        raise RayArchiveError(f"{directory}: want one ray-*.dist-info there, found {len(found)}")
    return found[0]


def _metadata(entries: Sequence[_Entry], dist_info: str, name: str) -> str:
    entry = next((e for e in entries if e.path == f"{dist_info}/{name}"), None)
    if entry is None:
        raise RayArchiveError(f"{dist_info}/{name} is missing")
    with entry.open() as f:
        return f.read().decode("utf-8")


def _field(text: str, key: str) -> list[str]:
    """Every value of ``key:`` among the header lines of an email-style metadata file."""
    values = []
    for line in text.splitlines():
        if not line.strip():
            break
        k, _, v = line.partition(":")
        if k.strip().lower() == key.lower():
            values.append(v.strip())
    return values


def build(source: Path, out: Path, level: int = 9) -> Manifest:
    """Pack Ray from ``source`` into the xz tarball ``out``.

    Args:
        source: Ray's wheel (``ray-*.whl``), or an installed Ray: its site-packages
            directory or its ``ray-*.dist-info`` directory there.
        out: The archive to write (replaced only once it is whole).
        level: The xz preset, 0 (fast) to 9 (smallest).

    Returns:
        The manifest stored in the archive.

    Raises:
        RayArchiveError: The source is not a Ray this can pack.
    """
    if not 0 <= level <= 9:
        raise RayArchiveError(f"xz level {level}: want 0 to 9")
    if source.is_file() and source.name.endswith(".whl"):
        with zipfile.ZipFile(source) as zf:
            return _pack(_wheel_entries(source, zf), source.name, out, level)
    if source.is_dir():
        dist_info = _installed_dist_info(source)
        return _pack(_installed_entries(dist_info), "installed", out, level)
    raise RayArchiveError(f"{source}: not a wheel, a site-packages or a dist-info directory")


def _pack(entries: list[_Entry], source: str, out: Path, level: int) -> Manifest:
    infos = sorted(
        {top for e in entries if (top := e.path.split("/", 1)[0]).endswith(".dist-info")}
    )
    if len(infos) != 1:
        raise RayArchiveError(f"{source}: want one *.dist-info directory, found {infos}")
    dist_info = infos[0]
    metadata = _metadata(entries, dist_info, "METADATA")
    tags = tuple(_field(_metadata(entries, dist_info, "WHEEL"), "Tag"))
    kept: list[_Entry] = []
    left: dict[str, list[_Entry]] = {prefix: [] for prefix in LEFT_OUT}
    for entry in sorted(entries, key=lambda e: (not e.path.startswith(dist_info), e.path)):
        top, _, rest = entry.path.partition("/")
        prefix = next((p for p in LEFT_OUT if entry.path.startswith(p)), None)
        if prefix is not None:
            left[prefix].append(entry)
        elif "__pycache__" not in entry.path.split("/") and not (
            top == dist_info and rest in INSTALL_METADATA
        ):
            kept.append(entry)
    manifest = Manifest(
        name=_field(metadata, "Name")[0].lower(),
        version=_field(metadata, "Version")[0],
        tags=tags or ("py3-none-any",),
        source=source,
        files=len(kept) + 3,  # with the manifest, INSTALLER and RECORD
        unpacked_bytes=sum(e.size for e in kept),
        left_out=tuple(
            LeftOut(prefix, len(es), sum(e.size for e in es), LEFT_OUT[prefix])
            for prefix, es in left.items()
            if es
        ),
        level=level,
    )
    if f"{manifest.name}-{manifest.version}.dist-info" != dist_info:
        raise RayArchiveError(f"{source}: {dist_info} does not match its METADATA")
    partial = out.with_name(out.name + ".partial")
    record: list[tuple[str, str, str]] = []
    with lzma.open(partial, "wb", preset=level) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for name, text in ((MANIFEST, manifest.to_json()), ("INSTALLER", INSTALLER)):
            data = text.encode("utf-8")
            _add(tar, f"{dist_info}/{name}", len(data), False, time.time(), io.BytesIO(data))
            record.append((f"{dist_info}/{name}", record_hash(data), str(len(data))))
        for entry in kept:
            with entry.open() as f:
                reader = _HashingReader(f)
                _add(tar, entry.path, entry.size, entry.executable, entry.mtime, reader)
            if reader.size != entry.size:
                raise RayArchiveError(f"{entry.path}: changed while it was packed")
            record.append((entry.path, hash_field(reader.digest), str(entry.size)))
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerows(record)
        writer.writerow((f"{dist_info}/RECORD", "", ""))
        data = buffer.getvalue().encode("utf-8")
        _add(tar, f"{dist_info}/RECORD", len(data), False, time.time(), io.BytesIO(data))
    partial.replace(out)
    return manifest


class _HashingReader:
    """A file's reader that hashes and counts what passes through it."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.digest.update(data)
        self.size += len(data)
        return data


def _add(
    tar: tarfile.TarFile, path: str, size: int, executable: bool, mtime: float, f: object
) -> None:
    info = tarfile.TarInfo(path)
    info.size = size
    info.mode = 0o755 if executable else 0o644
    info.mtime = int(mtime)
    tar.addfile(info, f)  # type: ignore[arg-type]
