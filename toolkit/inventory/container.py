"""The ``container:`` section: its checks, and a node's container with defaults applied.

A node's ``container`` keys replace the defaults' one by one (a node's ``mounts`` or
``options`` list replaces the defaults' list); a node has a container when either
sets any key, and then needs a runtime and an image.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from toolkit.inventory.models import ContainerSettings
from toolkit.inventory.problems import format_path
from toolkit.inventory.resolved import Container
from toolkit.inventory.yamlmap import KeyPath

# A bind mount: SRC:DST or SRC:DST:OPTIONS, DST absolute (OPTIONS: ro, rw, z, Z).
MOUNT = re.compile(r"[^:\s]+:/[^:\s]*(?::(?:ro|rw|z|Z)(?:,(?:ro|rw|z|Z))*)?")
# Words of docker/podman run that rtk sets itself, and why they may not be given.
RESERVED_RUN_OPTIONS = {
    "--name": "rtk names the container rtk-<cluster>-<node>",
    "--network": "rtk runs it with the host's network",
    "--net": "rtk runs it with the host's network",
    "-d": "rtk starts it detached",
    "--detach": "rtk starts it detached",
    "--ipc": "rtk uses the host's IPC, or the container's own with container.shm_size",
    "--shm-size": "use container.shm_size",
    "--gpus": "use container.gpus",
}
# Ray's command inside an image when the inventory names none.
CONTAINER_RAY = ("ray",)

Add = Callable[[KeyPath, str], None]


def check_container(container: ContainerSettings, where: KeyPath, add: Add) -> None:
    """Each mount's form, and no option that rtk sets itself, in one settings block."""
    for index, mount in enumerate(container.mounts or ()):
        if not MOUNT.fullmatch(mount):
            add(
                (*where, "container", "mounts", index),
                f"got {mount!r}; a mount is SRC:DST or SRC:DST:ro, DST an absolute path in "
                "the container (options: ro, rw, z, Z)",
            )
    for index, word in enumerate(container.options or ()):
        reserved = next(
            (o for o in RESERVED_RUN_OPTIONS if word == o or word.startswith(o + "=")), None
        )
        if reserved is not None:
            add(
                (*where, "container", "options", index),
                f"got {word!r}; {RESERVED_RUN_OPTIONS[reserved]}, so it may not appear here",
            )


def check_complete(
    defaults: ContainerSettings,
    own: ContainerSettings,
    where: KeyPath,
    add: Add,
    said: set[str],
) -> None:
    """A node with a container (its own or the defaults') has a runtime and an image.

    The problem is reported where the node sets its container, else once at
    ``defaults.container`` (``said`` holds the paths already reported).
    """
    if not _has_container(defaults, own):
        return
    missing = [key for key in ("runtime", "image") if _pick(defaults, own, key) is None]
    if not missing:
        return
    at: KeyPath = (*where, "container") if own.model_fields_set else ("defaults", "container")
    if format_path(at) in said:
        return
    said.add(format_path(at))
    add(
        at,
        f"{' and '.join(missing)} missing; a container needs a runtime (docker or podman; "
        "apptainer or pyxis under SLURM) and an image, here or in defaults.container",
    )


def merge_container(defaults: ContainerSettings, own: ContainerSettings) -> Container | None:
    """The node's container, its own keys over the defaults'; None when it has none."""
    if not _has_container(defaults, own):
        return None
    runtime, image = _pick(defaults, own, "runtime"), _pick(defaults, own, "image")
    if runtime is None or image is None:
        return None  # reported by check_complete
    shm = _pick(defaults, own, "shm_size")
    return Container(
        runtime=str(runtime),
        image=str(image),
        mounts=tuple(own.mounts if own.mounts is not None else defaults.mounts or ()),
        options=tuple(own.options if own.options is not None else defaults.options or ()),
        gpus=str(_pick(defaults, own, "gpus") or "auto"),
        shm_size_bytes=int(shm) if isinstance(shm, int) else None,
    )


def _has_container(defaults: ContainerSettings, own: ContainerSettings) -> bool:
    return bool(defaults.model_fields_set or own.model_fields_set)


def _pick(defaults: ContainerSettings, own: ContainerSettings, key: str) -> object:
    value = getattr(own, key)
    return getattr(defaults, key) if value is None else value
