"""Ray for the wheelhouse: its archive, the wheels of what it needs that the GPU lacks.

``bash scripts/gpu-wheelhouse.sh DIR --with-ray`` runs ``python -m gpu_acceptance.ray_archive
wheelhouse DIR --version V``. pip downloads ``ray[default]==V`` and everything it needs
for CPython 3.12 on manylinux x86_64, resolved together so that the versions agree. The
Ray wheel becomes the archive (``pack.build``, without ``ray/jars/``). Of the rest, only
the wheels on a requirement path from Ray that passes through nothing the GPU image has
(``GPU_IMAGE_HAS``) or the wheelhouse already holds go to ``DIR/ray-deps/``: the GPU
machine's aiohttp is there with its own dependencies, so yarl never travels. Every
name left behind is printed with its reason, and the sizes: checkout (``git ls-files``)
plus wheelhouse plus archive must stay within the budget (exit 1 when not).

Build machine only: it needs pip and the ``packaging`` library (pip's copy will do).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # pragma: no cover - a build machine with pip alone
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef,assignment,unused-ignore]

from gpu_acceptance.install import distribution_of, normalize
from gpu_acceptance.ray_archive.manifest import (
    DEPS_DIR,
    SUFFIX,
    RayArchiveError,
    archive_name,
    describe,
)
from gpu_acceptance.ray_archive.pack import build

EXTRAS = ("default",)  # the dashboard, the Jobs API, py-spy
# What the GPU image (Python 3.12.3, torch 2.11.0+cu130) already has, Ray's dependencies
# among it, each with its own dependencies. torch brings typing-extensions, jinja2
# (with markupsafe), fsspec and filelock.
GPU_IMAGE_HAS = (
    "aiohttp",
    "grpcio",
    "protobuf",
    "pyyaml",
    "requests",
    "msgpack",
    "click",
    "filelock",
    "prometheus-client",
    "psutil",
    "typing-extensions",
    "jinja2",
    "markupsafe",
    "fsspec",
    "numpy",
    "torch",
)
# The GPU machine's Python, for pip and for Requires-Dist markers (the same target as
# the rest of scripts/gpu-wheelhouse.sh).
PIP_TARGET = (
    "--only-binary=:all:",
    "--python-version", "3.12",
    "--implementation", "cp",
    "--abi", "cp312",
    "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux_2_17_x86_64",
    "--platform", "manylinux2014_x86_64",
)  # fmt: skip
MARKER_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
BUDGET_MIB = 60.0
MIB = 2**20
# The wheelhouse as `gpu-wheelhouse.sh DIR --with-ray` last filled it (Ray 2.60.0 on
# 2026-11-28: archive 23.9 + ray-deps 11.4 + the rest 14.8 MiB), carried to the H200
# for the essentials run. CI holds the checkout to what is left of the budget beside it
# (filling it again needs the registry and minutes of xz -9: the script checks it then).
MEASURED_WHEELHOUSE_MIB = 50.1


@dataclass(frozen=True)
class Wheel:
    """A downloaded wheel: its project, version and ``Requires-Dist`` lines."""

    path: Path
    name: str
    version: str
    requires: tuple[str, ...]


def read_wheel(path: Path) -> Wheel:
    """Name, version and requirements from a wheel's METADATA."""
    with zipfile.ZipFile(path) as zf:
        metadata = next(
            (n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")),
            None,
        )
        if metadata is None:
            raise RayArchiveError(f"{path.name}: no METADATA")
        text = zf.read(metadata).decode("utf-8")
    headers: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        headers.setdefault(key.strip().lower(), []).append(value.strip())
    return Wheel(
        path,
        normalize(headers["name"][0]),
        headers["version"][0],
        tuple(headers.get("requires-dist", [])),
    )


def requirements(wheel: Wheel, extras: Iterable[str]) -> list[Requirement]:
    """``wheel``'s requirements on the GPU machine's Python, with ``extras`` asked for."""
    wanted = ["", *extras]
    found = []
    for line in wheel.requires:
        req = Requirement(line)
        if req.marker is None or any(
            req.marker.evaluate({**MARKER_ENV, "extra": extra}) for extra in wanted
        ):
            found.append(req)
    return found


@dataclass
class Selection:
    """Which downloaded wheels travel, and why each other name does not.

    Attributes:
        carried: The wheels for ``ray-deps/``, by project name.
        not_carried: Project name -> why it stays behind.
    """

    carried: dict[str, Wheel] = field(default_factory=dict)
    not_carried: dict[str, str] = field(default_factory=dict)


def select(
    root: str,
    extras: Sequence[str],
    wheels: Mapping[str, Wheel],
    image_has: Iterable[str],
    wheelhouse_has: Iterable[str],
) -> Selection:
    """Walk ``root``'s requirements (with ``extras``), stopping at what is already there.

    A project the GPU image or the wheelhouse has is not followed further: its own
    dependencies are there with it.

    Raises:
        RayArchiveError: A requirement on the walk was not downloaded.
    """
    image = {normalize(n) for n in image_has}
    house = {normalize(n) for n in wheelhouse_has}
    chosen = Selection()
    asked: dict[str, set[str]] = {}
    queue: deque[tuple[str, frozenset[str]]] = deque([(normalize(root), frozenset(extras))])
    while queue:
        name, wanted = queue.popleft()
        if name in asked and wanted <= asked[name]:  # seen with these extras already
            continue
        asked.setdefault(name, set()).update(wanted)
        for req in requirements(wheels[name], wanted):
            dep = normalize(req.name)
            if dep in image:
                chosen.not_carried[dep] = "the GPU image has it"
            elif dep in house:
                chosen.not_carried[dep] = "the wheelhouse has it"
            elif dep not in wheels:
                raise RayArchiveError(f"{dep} (needed by {name}) was not downloaded")
            else:
                chosen.carried[dep] = wheels[dep]
                queue.append((dep, frozenset(req.extras)))
    for name in wheels:
        if name != normalize(root) and name not in chosen.carried:
            chosen.not_carried.setdefault(
                name, "needed only by what the GPU image or the wheelhouse has"
            )
    return chosen


def tree_bytes(path: Path) -> int:
    """Total size of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def checkout_bytes(repo: Path) -> int:
    """Total size of the files ``git ls-files`` lists in ``repo`` (what travels)."""
    done = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=False
    )
    if done.returncode != 0:
        raise RayArchiveError(f"git ls-files in {repo}: {done.stderr.decode()[-300:]}")
    total = 0
    for name in done.stdout.decode().split("\0"):
        path = repo / name
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def download(python: str, dest: Path, version: str) -> dict[str, Wheel]:
    """``pip download ray[default]==VERSION`` for the GPU machine; project -> wheel."""
    spec = f"ray[{','.join(EXTRAS)}]=={version}"
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*argv, "-d", str(dest), *PIP_TARGET, spec], check=False)
    if done.returncode != 0:
        raise RayArchiveError(f"pip download {spec} exited {done.returncode}")
    return {w.name: w for w in map(read_wheel, sorted(dest.glob("*.whl")))}


def fill(
    directory: Path, version: str, python: str, level: int, repo: Path, budget_mib: float
) -> list[str]:
    """Put Ray's archive and ``ray-deps/`` into ``directory``; the lines to print.

    Raises:
        RayArchiveError: A download or the archive failed, or the budget is exceeded
            (the files stay, for a look).
    """
    shutil.rmtree(directory / DEPS_DIR, ignore_errors=True)
    for stale in directory.glob(f"ray-*{SUFFIX}"):
        stale.unlink()
    house = [n for p in directory.iterdir() if p.is_file() and (n := distribution_of(p.name))]
    with tempfile.TemporaryDirectory(prefix="rtk-ray-download-") as tmp:
        wheels = download(python, Path(tmp), version)
        if "ray" not in wheels:
            raise RayArchiveError(f"pip download brought no Ray wheel: {sorted(wheels)}")
        staged = directory / f".ray{SUFFIX}.partial"
        manifest = build(wheels["ray"].path, staged, level)
        archive = directory / archive_name(manifest)
        staged.replace(archive)
        chosen = select("ray", EXTRAS, wheels, GPU_IMAGE_HAS, house)
        (directory / DEPS_DIR).mkdir()
        for wheel in chosen.carried.values():
            shutil.copy2(wheel.path, directory / DEPS_DIR / wheel.path.name)
    lines = [f"{archive.name}: {archive.stat().st_size / MIB:.1f} MiB", *describe(manifest)]
    deps_bytes = tree_bytes(directory / DEPS_DIR)
    carried = ", ".join(f"{w.name} {w.version}" for w in chosen.carried.values())
    lines.append(
        f"{DEPS_DIR}/: {len(chosen.carried)} wheels, {deps_bytes / MIB:.1f} MiB: {carried}"
    )
    by_reason: dict[str, list[str]] = {}
    for name, why in sorted(chosen.not_carried.items()):
        by_reason.setdefault(why, []).append(name)
    lines += [f"not carried ({why}): {', '.join(names)}" for why, names in by_reason.items()]
    archive_bytes = archive.stat().st_size
    house_bytes = tree_bytes(directory)
    rest = house_bytes - archive_bytes - deps_bytes
    checkout = checkout_bytes(repo)
    total = house_bytes + checkout
    lines.append(
        f"sizes: archive {archive_bytes / MIB:.1f} + ray deps {deps_bytes / MIB:.1f} + rest of"
        f" the wheelhouse {rest / MIB:.1f} = wheelhouse {house_bytes / MIB:.1f} MiB;"
        f" checkout {checkout / MIB:.1f} MiB; sum {total / MIB:.1f} MiB of {budget_mib:g} MiB"
    )
    if total > budget_mib * MIB:
        raise RayArchiveError(
            "\n".join([*lines, f"over the budget by {(total - budget_mib * MIB) / MIB:.1f} MiB"])
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``wheelhouse DIR --version V``: the command line of ``fill``."""
    p = argparse.ArgumentParser(prog="python -m gpu_acceptance.ray_archive wheelhouse")
    p.add_argument("directory", type=Path)
    p.add_argument("--version", required=True, help="Ray's version (the one rtk runs with)")
    p.add_argument("--python", default=sys.executable, help="whose pip downloads")
    p.add_argument("--level", type=int, default=9, help="xz preset, 0-9 (default 9)")
    p.add_argument("--repo", type=Path, default=Path(os.getcwd()), help="the checkout")
    p.add_argument("--budget-mib", type=float, default=BUDGET_MIB)
    args = p.parse_args(argv)
    try:
        lines = fill(
            args.directory, args.version, args.python, args.level, args.repo, args.budget_mib
        )
    except RayArchiveError as e:
        for line in str(e).splitlines():
            print(f"gpu-wheelhouse: {line}", file=sys.stderr)
        return 1
    for line in lines:
        print(f"gpu-wheelhouse: {line}")
    return 0
