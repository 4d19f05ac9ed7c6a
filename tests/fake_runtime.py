"""A stand-in ``docker``/``podman`` on PATH that keeps its containers in a JSON file.

rtk's container commands are shell text (``cluster.containers.docker``); these tests run that
text with ``sh`` for real, against this fake, so the quoting, the wait for Ray, the
filters that pick exactly rtk's containers and the exit statuses are the ones a
node's shell would see. The fake does what the runtimes document for the words rtk
uses: ``run -d``, ``ps -a [-q] --filter label=K=V --filter name=REGEX --format``,
``logs [--tail N]``, ``container inspect --format``, ``stop``, ``rm -f``, ``exec``,
``version``, ``image inspect``/``image exists`` and ``info``. Every call is recorded.

What a started container does depends on its image: ``ray:ok`` prints Ray's ready
line on the third look at its log (a start that takes a while), ``ray:quick`` on the
first; ``ray:crash`` has exited with an error; ``ray:hang`` runs and never gets ready.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

READY = "Ray runtime started."
# run's words that take a value (rtk's own, and the options the tests give).
VALUE_FLAGS = {"--name", "--label", "-v", "--gpus", "--device", "--security-opt"}

SCRIPT = """\
#!{python}
import sys
sys.path.insert(0, {tests!r})
import fake_runtime
sys.exit(fake_runtime.main({runtime!r}, sys.argv[1:]))
"""


def install(bin_dir: Path, state: Path, runtimes: tuple[str, ...] = ("docker", "podman")) -> None:
    """Write the fake runtimes into ``bin_dir``; their state goes to ``state`` (JSON)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for runtime in runtimes:
        path = bin_dir / runtime
        path.write_text(
            SCRIPT.format(python=sys.executable, tests=str(Path(__file__).parent), runtime=runtime)
        )
        path.chmod(0o755)
    if not state.exists():
        save(state, empty_state())


def empty_state() -> dict[str, Any]:
    """A runtime with no container, the test images, and the nvidia runtime."""
    return {
        "containers": [],
        "images": ["ray:ok", "ray:quick", "ray:crash", "ray:hang"],
        "runtimes": {"runc": {}, "nvidia": {}},
        "calls": [],
        "down": False,
        "next_id": 1,
    }


def load(state: Path) -> dict[str, Any]:
    """The fake's state."""
    data: dict[str, Any] = json.loads(state.read_text())
    return data


def save(state: Path, data: dict[str, Any]) -> None:
    """Replace the fake's state."""
    state.write_text(json.dumps(data))


def add_container(
    state: Path, name: str, labels: dict[str, str], image: str = "other:1", running: bool = True
) -> str:
    """Put a container there (someone else's, or a leftover of rtk's); its id."""
    data = load(state)
    cid = _new_container(data, name, labels, image, "running" if running else "exited", [])
    save(state, data)
    return cid


def names(state: Path) -> set[str]:
    """The names of the containers there."""
    return {c["name"] for c in load(state)["containers"]}


def main(runtime: str, args: list[str]) -> int:
    """Run one fake command: its state from ``$FAKE_RUNTIME_STATE``."""
    state = Path(os.environ["FAKE_RUNTIME_STATE"])
    data = load(state)
    data["calls"].append(shlex.join([runtime, *args]))
    try:
        if data["down"]:
            print(f"Cannot connect to the {runtime} daemon. Is it running?", file=sys.stderr)
            return 1
        verb, rest = args[0], args[1:]
        return HANDLERS[verb](runtime, rest, data)
    finally:
        save(state, data)


def _new_container(
    data: dict[str, Any],
    name: str,
    labels: dict[str, str],
    image: str,
    state: str,
    argv: list[str],
) -> str:
    """Add a container to ``data``; its id."""
    cid = f"c{data['next_id']:04d}"
    data["next_id"] += 1
    data["containers"].append(
        {
            "id": cid,
            "name": name,
            "labels": labels,
            "image": image,
            "state": state,
            "looks": 0,
            "argv": argv,
        }
    )
    return cid


def _find(data: dict[str, Any], ref: str) -> dict[str, Any] | None:
    return next((c for c in data["containers"] if ref in (c["id"], c["name"])), None)


def _existing(data: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """The container ``ref`` names; None, with the runtime's error printed, if none."""
    found = _find(data, ref)
    if found is None:
        print(f"Error: No such container: {ref}", file=sys.stderr)
    return found


def _version(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    print("27.1.0" if runtime == "docker" else "4.3.1")
    return 0


def _info(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    print(json.dumps(data["runtimes"]))
    return 0


def _image(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    """``image inspect IMAGE`` and ``image exists IMAGE``."""
    present = args[-1] in data["images"]
    if not present:
        print(f"Error: No such image: {args[-1]}", file=sys.stderr)
    return 0 if present else 1


def _container(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    """``container inspect --format {{.State.Running}} REF``."""
    assert args[0] == "inspect", args
    c = _existing(data, args[-1])
    if c is None:
        return 1
    print("true" if c["state"] == "running" else "false")
    return 0


def _run(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    labels: dict[str, str] = {}
    name = ""
    i = 0
    while args[i].startswith("-"):
        flag = args[i]
        value = args[i + 1] if flag in VALUE_FLAGS else None
        if flag == "--name":
            name = str(value)
        if flag == "--label":
            key, _, val = str(value).partition("=")
            labels[key] = val
        i += 2 if value is not None else 1
    image = args[i]
    if _find(data, name) is not None:
        print(f'Error: the container name "{name}" is already in use', file=sys.stderr)
        return 125
    if image not in data["images"]:
        print(f"Unable to find image '{image}' locally", file=sys.stderr)
        return 125
    state = "exited" if image == "ray:crash" else "running"
    print(_new_container(data, name, labels, image, state, args[i + 1 :]))
    return 0


def _matches(container: dict[str, Any], filters: list[str]) -> bool:
    for f in filters:
        key, _, value = f.partition("=")
        if key == "label":
            k, _, v = value.partition("=")
            if container["labels"].get(k) != v:
                return False
        elif key == "name" and not re.search(value, container["name"]):
            return False
    return True


def _ps(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    filters = [args[i + 1] for i, a in enumerate(args) if a == "--filter"]
    fmt = args[args.index("--format") + 1] if "--format" in args else None
    every = "-a" in args or "-aq" in args
    for c in data["containers"]:
        if (every or c["state"] == "running") and _matches(c, filters):
            print(c["state"] if fmt == "{{.State}}" else c["id"])
    return 0


def _logs(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    c = _existing(data, args[-1])
    if c is None:
        return 1
    c["looks"] += 1
    if c["image"] == "ray:crash":
        print("raylet exited: address already in use", file=sys.stderr)
    elif c["looks"] >= {"ray:ok": 3, "ray:quick": 1}.get(c["image"], 1_000_000):
        print("Local node IP: 10.0.0.1")
        print(READY)
    return 0


def _stop(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    for ref in args[2:]:  # -t N
        c = _find(data, ref)
        if c is not None:
            c["state"] = "exited"
            print(ref)
    return 0


def _rm(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    for ref in (a for a in args if a != "-f"):
        c = _find(data, ref)
        if c is not None:
            data["containers"].remove(c)
            print(c["id"])
    return 0


def _exec(runtime: str, args: list[str], data: dict[str, Any]) -> int:
    words = [a for a in args if a not in ("-i", "-t")]
    c = _find(data, words[0])
    if c is None or c["state"] != "running":
        print(f"Error: container {words[0]} is not running", file=sys.stderr)
        return 1
    return subprocess.run(words[1:], check=False).returncode


# The first word of each command the fake knows, and what it does: (runtime, the
# words after it, the state) -> exit status.
HANDLERS: dict[str, Callable[[str, list[str], dict[str, Any]], int]] = {
    "version": _version,
    "info": _info,
    "image": _image,
    "container": _container,
    "run": _run,
    "ps": _ps,
    "logs": _logs,
    "stop": _stop,
    "rm": _rm,
    "exec": _exec,
}
