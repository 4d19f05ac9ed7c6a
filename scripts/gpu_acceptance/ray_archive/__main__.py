"""``python -m gpu_acceptance.ray_archive``: build, install (see the package's docstring)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gpu_acceptance.ray_archive.manifest import SUFFIX, RayArchiveError, describe
from gpu_acceptance.ray_archive.pack import build
from gpu_acceptance.ray_archive.unpack import install


def main(argv: Sequence[str] | None = None) -> int:
    """``build``, ``install`` or ``wheelhouse``; one line on stderr when it fails."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["wheelhouse"]:  # build machine only: needs pip and packaging
        from gpu_acceptance.ray_archive import wheelhouse

        return wheelhouse.main(argv[1:])
    p = argparse.ArgumentParser(
        prog="python -m gpu_acceptance.ray_archive",
        epilog="wheelhouse DIR --version V: the archive and Ray's dependency wheels (--help)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="pack Ray from its wheel or an installed copy")
    b.add_argument("source", type=Path, help="ray-*.whl, or site-packages / ray-*.dist-info")
    b.add_argument("out", type=Path, help=f"the archive to write (*{SUFFIX})")
    b.add_argument("--level", type=int, default=9, help="xz preset, 0-9 (default 9)")
    i = sub.add_parser("install", help="unpack an archive and write Ray's console scripts")
    i.add_argument("archive", type=Path)
    i.add_argument("--site-packages", type=Path, required=True)
    i.add_argument("--bin-dir", type=Path, required=True)
    i.add_argument("--python", help="the target interpreter (default: this one)")
    args = p.parse_args(argv)
    try:
        if args.command == "build":
            manifest = build(args.source, args.out, args.level)
            size_mib = args.out.stat().st_size / 2**20
            print(f"ray-archive: {args.out} ({size_mib:.1f} MiB)")
            for line in describe(manifest):
                print(f"ray-archive: {line}")
        else:
            done = install(args.archive, args.site_packages, args.bin_dir, args.python)
            what = f"{done.manifest.name} {done.manifest.version}"
            print(f"ray-archive: {what} into {done.site_packages}")
            for script in done.scripts:
                print(f"ray-archive: script {script}")
    except RayArchiveError as e:
        print(f"ray-archive: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
