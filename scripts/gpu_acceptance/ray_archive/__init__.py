"""Ray packed for a GPU machine without network: one xz tarball of an installed Ray.

``build`` packs Ray, from its wheel or from an installed copy, into a ``.tar.xz`` whose
members are paths relative to site-packages: the ``ray/`` package without what
``LEFT_OUT`` names (``ray/jars/``: 33 MB of Java a Python cluster never starts), and
the ``ray-V.dist-info`` directory with its RECORD regenerated for the files kept, so
that pip and ``importlib.metadata`` see an installed Ray and ``pip uninstall ray``
removes exactly what was installed. The first member, ``ray-V.dist-info/RTK_ARCHIVE.json``
(the ``Manifest``), says what the archive holds and what was left out, and why.

``install`` unpacks it into a site-packages directory (into a hidden folder there
first, moved into place only when whole) and writes Ray's console scripts (``ray``,
``serve``, ``tune``: the ``console_scripts`` of its ``entry_points.txt``) into a bin
directory for the target interpreter, adding them to RECORD.

The standard library alone: this runs on the GPU machine before anything is installed.

    python -m gpu_acceptance.ray_archive build SOURCE OUT [--level N]
    python -m gpu_acceptance.ray_archive install ARCHIVE --site-packages DIR --bin-dir DIR
        [--python PY]
"""

from __future__ import annotations

from gpu_acceptance.ray_archive.manifest import (
    DEPS_DIR,
    SUFFIX,
    LeftOut,
    Manifest,
    RayArchiveError,
    archive_name,
    describe,
)
from gpu_acceptance.ray_archive.pack import build
from gpu_acceptance.ray_archive.unpack import Installed, install, read_manifest

__all__ = [
    "DEPS_DIR",
    "SUFFIX",
    "Installed",
    "LeftOut",
    "Manifest",
    "RayArchiveError",
    "archive_name",
    "build",
    "describe",
    "install",
    "read_manifest",
]
