"""Unpack a Ray archive into a site-packages and write Ray's console scripts (``install``)."""

from __future__ import annotations

import configparser
import csv
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_acceptance.ray_archive.manifest import (
    MANIFEST,
    MAX_SHEBANG,
    Manifest,
    RayArchiveError,
    record_hash,
    safe_path,
)


@dataclass(frozen=True)
class Installed:
    """What ``install`` put where."""

    manifest: Manifest
    site_packages: Path
    scripts: tuple[Path, ...]


@dataclass(frozen=True)
class Interpreter:
    """The target Python, as far as a wheel tag cares.

    Attributes:
        path: How it was named (a venv's ``bin/python`` stays unresolved).
        tag: Its interpreter tag (``cp312``).
        platform: ``sysconfig.get_platform()`` there (``linux-x86_64``).
    """

    path: str
    tag: str
    platform: str


def interpreter(python: str) -> Interpreter:
    """Ask ``python`` for its tag and platform (no subprocess when it is this one)."""
    if python == sys.executable:
        tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        if sys.implementation.name != "cpython":
            tag = sys.implementation.name[:2] + tag[2:]
        return Interpreter(python, tag, sysconfig.get_platform())
    code = (
        "import sys, sysconfig; i = sys.implementation.name;"
        " print(('cp' if i == 'cpython' else i[:2]) + '%d%d' % sys.version_info[:2],"
        " sysconfig.get_platform())"
    )
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RayArchiveError(f"cannot run {python}: {e}") from e
    if done.returncode != 0:
        raise RayArchiveError(f"{python} -c ...: exited {done.returncode}: {done.stderr[-300:]}")
    tag, platform = done.stdout.split()
    return Interpreter(python, tag, platform)


def compatible(tags: Sequence[str], target: Interpreter) -> bool:
    """Whether any wheel tag (``cp312-cp312-manylinux2014_x86_64``) fits ``target``."""
    system, _, machine = target.platform.partition("-")
    major = target.tag[2:3]
    for tag in tags:
        pythons, _, rest = tag.partition("-")
        _, _, platforms = rest.partition("-")
        python_ok = any(
            p in (target.tag, f"py{major}", f"py{target.tag[2:]}") for p in pythons.split(".")
        )
        platform_ok = any(
            p == "any" or (system in p and p.endswith(machine)) for p in platforms.split(".")
        )
        if python_ok and platform_ok:
            return True
    return False


def read_manifest(archive: Path) -> Manifest:
    """The manifest of ``archive`` (its first member: the rest is not decompressed)."""
    try:
        with tarfile.open(archive, "r:xz") as tar:
            return _first_manifest(tar, archive)
    except (OSError, tarfile.TarError, EOFError) as e:
        raise RayArchiveError(f"{archive}: not a readable xz tarball: {e}") from e


def _first_manifest(tar: tarfile.TarFile, archive: Path) -> Manifest:
    member = tar.next()
    if member is None or not member.isfile() or not member.name.endswith(f".dist-info/{MANIFEST}"):
        first = member.name if member else "nothing"
        raise RayArchiveError(f"{archive}: not a Ray archive (it begins with {first})")
    f = tar.extractfile(member)
    assert f is not None
    return Manifest.from_json(f.read().decode("utf-8"))


def install(
    archive: Path, site_packages: Path, bin_dir: Path, python: str | None = None
) -> Installed:
    """Unpack ``archive`` into ``site_packages``; write its console scripts into ``bin_dir``.

    Args:
        archive: What ``build`` wrote.
        site_packages: The target Python's site-packages (its ``platlib``).
        bin_dir: Where the target's scripts go (its ``scripts`` path).
        python: The target interpreter, for the scripts' first line and the wheel-tag
            check (default: this one).

    Returns:
        The manifest, the site-packages and the scripts written.

    Raises:
        RayArchiveError: Not a Ray archive, not for that Python, Ray already there, or
            a member that is not a plain file inside site-packages.
    """
    target = interpreter(python or sys.executable)
    try:
        with tarfile.open(archive, "r:xz") as tar:
            manifest = _first_manifest(tar, archive)
            if not compatible(manifest.tags, target):
                raise RayArchiveError(
                    f"{archive.name} is for {', '.join(manifest.tags)}; {target.path} is"
                    f" {target.tag} on {target.platform}"
                )
            there = [
                site_packages / manifest.name,
                *site_packages.glob(f"{manifest.name}-*.dist-info"),
            ]
            if any(p.exists() for p in there):
                raise RayArchiveError(
                    f"{site_packages} already has {manifest.name}: uninstall it first"
                )
            site_packages.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".rtk-ray-", dir=site_packages))
            try:
                _unpack(tar, manifest, staging)
                tops = sorted(staging.iterdir())
                clash = [t.name for t in tops if (site_packages / t.name).exists()]
                if clash:
                    raise RayArchiveError(f"{site_packages} already has {clash}")
                for top in tops:
                    os.replace(top, site_packages / top.name)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except (OSError, tarfile.TarError, EOFError) as e:
        raise RayArchiveError(f"{archive}: cannot unpack into {site_packages}: {e}") from e
    scripts = _write_scripts(
        site_packages / manifest.dist_info, site_packages, bin_dir, target.path
    )
    return Installed(manifest, site_packages, scripts)


def _unpack(tar: tarfile.TarFile, manifest: Manifest, staging: Path) -> None:
    """Every member as a plain file under ``staging`` (the manifest's too)."""
    manifest_path = f"{manifest.dist_info}/{MANIFEST}"
    (staging / manifest.dist_info).mkdir()
    (staging / manifest_path).write_text(manifest.to_json(), encoding="utf-8")
    for member in tar:
        if member.name == manifest_path or member.isdir():
            continue
        if not member.isfile():
            raise RayArchiveError(f"{member.name}: not a plain file; refusing it")
        path = staging / safe_path(member.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(member)
        assert src is not None
        with src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        path.chmod(0o755 if member.mode & 0o111 else 0o644)
        os.utime(path, (member.mtime, member.mtime))


def console_scripts(entry_points: str) -> dict[str, str]:
    """``entry_points.txt``'s console scripts: name -> ``module:function``."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(entry_points)
    if not parser.has_section("console_scripts"):
        return {}
    return dict(parser["console_scripts"])


def script_text(python: str, spec: str) -> str:
    """A console script running ``spec`` (``module:function``) with ``python``."""
    module, _, attr = spec.partition(":")
    module, attr = module.strip(), attr.split("[", 1)[0].strip()
    if not module or not attr:
        raise RayArchiveError(f"entry point {spec!r}: want module:function")
    if len(python) <= MAX_SHEBANG and not any(c.isspace() for c in python):
        start = f"#!{python}\n"
    else:  # sh runs the line below; Python reads it as a string
        start = f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\n"
    return (
        f"{start}import sys\n\nfrom {module} import {attr.split('.', 1)[0]}\n\n"
        f'if __name__ == "__main__":\n    sys.exit({attr}())\n'
    )


def _write_scripts(
    dist_info: Path, site_packages: Path, bin_dir: Path, python: str
) -> tuple[Path, ...]:
    entry_points = dist_info / "entry_points.txt"
    text = entry_points.read_text(encoding="utf-8") if entry_points.is_file() else ""
    bin_dir.mkdir(parents=True, exist_ok=True)
    written, rows = [], []
    for name, spec in sorted(console_scripts(text).items()):
        path = bin_dir / name
        data = script_text(python, spec).encode("utf-8")
        partial = path.with_name(f".{name}.partial")
        partial.write_bytes(data)
        partial.chmod(0o755)
        partial.replace(path)
        written.append(path)
        rel = Path(os.path.relpath(path, site_packages)).as_posix()
        rows.append((rel, record_hash(data), str(len(data))))
    if rows:
        with (dist_info / "RECORD").open("a", newline="", encoding="utf-8") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
    return tuple(written)
