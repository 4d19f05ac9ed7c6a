"""The inventory's ``container:`` section: inheritance key by key, and mistakes by file:line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import rtk

from toolkit.errors import InventoryError
from toolkit.inventory import Container, load_inventory

INHERITED = """\
cluster: demo
defaults:
  python: /usr/bin/python3
  container:
    runtime: docker
    image: rtk-ray:1
    mounts: [/data:/data:ro]
    options: [--cap-add, SYS_ADMIN]
nodes:
  - host: n1
    gpus: 8
  - host: n2
    container:
      runtime: podman
      mounts: [/scratch:/scratch]
      gpus: none
      shm_size: 16GiB
  - host: n3
    ray: /opt/venv/bin/ray
    container:
      image: rtk-ray:2
      options: []
"""


def load_text(tmp_path: Path, text: str) -> list[str]:
    """The problems of ``text`` as ``rtk inventory check`` prints them (file name inv.yaml)."""
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(InventoryError) as raised:
        load_inventory(path)
    return [str(p).replace(str(path), "inv.yaml") for p in raised.value.problems]


def test_a_node_key_replaces_the_defaults_key_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INHERITED)
    nodes = {n.name: n for n in load_inventory(path).nodes}
    assert nodes["n1"].container == Container(
        runtime="docker",
        image="rtk-ray:1",
        mounts=("/data:/data:ro",),
        options=("--cap-add", "SYS_ADMIN"),
        gpus="auto",
        shm_size_bytes=None,
    )
    # A node's list replaces the defaults' list; its scalars replace theirs one by one.
    assert nodes["n2"].container == Container(
        runtime="podman",
        image="rtk-ray:1",
        mounts=("/scratch:/scratch",),
        options=("--cap-add", "SYS_ADMIN"),
        gpus="none",
        shm_size_bytes=16 * 1024**3,
    )
    n3 = nodes["n3"].container
    assert n3 is not None
    assert (n3.runtime, n3.image, n3.mounts, n3.options) == (
        "docker",
        "rtk-ray:2",
        ("/data:/data:ro",),
        (),
    )


def test_ray_defaults_to_the_images_ray_and_python_stays_the_hosts(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INHERITED)
    nodes = {n.name: n for n in load_inventory(path).nodes}
    assert nodes["n1"].ray == ("ray",)
    assert nodes["n3"].ray == ("/opt/venv/bin/ray",)
    assert all(n.python == "/usr/bin/python3" for n in nodes.values())


def test_no_container_section_means_ray_on_the_host(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("cluster: demo\nnodes:\n  - host: n1\n  - host: n2\n    container: {}\n")
    inv = load_inventory(path)
    assert [n.container for n in inv.nodes] == [None, None]
    assert inv.nodes[0].ray == ("python3", "-m", "ray.scripts.scripts")


@pytest.mark.parametrize(
    ("gpus", "node_gpus", "wanted"),
    [("auto", 8, True), ("auto", 0, False), ("all", 0, True), ("none", 8, False)],
)
def test_which_containers_get_gpus(gpus: str, node_gpus: int, wanted: bool) -> None:
    assert Container("docker", "i", gpus=gpus).wants_gpus(node_gpus) is wanted


MISTAKES = {
    "unknown runtime": (
        """\
        cluster: demo
        defaults:
          container:
            runtime: dockr
            image: i
        nodes:
          - host: n1
        """,
        [
            "inv.yaml:4: defaults.container.runtime: got 'dockr'; expected 'docker', 'podman', "
            "'apptainer' or 'pyxis'"
        ],
    ),
    "gpus not a mode": (
        """\
        cluster: demo
        nodes:
          - host: n1
            container: {runtime: docker, image: i, gpus: 8}
        """,
        ["inv.yaml:4: nodes[0].container.gpus: got 8; expected 'auto', 'none' or 'all'"],
    ),
    "shm size not a size": (
        """\
        cluster: demo
        nodes:
          - host: n1
            container:
              runtime: docker
              image: i
              shm_size: big
        """,
        ["inv.yaml:7: nodes[0].container.shm_size: got 'big'; expected a valid integer"],
    ),
    "unknown key": (
        """\
        cluster: demo
        nodes:
          - host: n1
            container:
              runtime: docker
              imge: i
        """,
        [
            "inv.yaml:6: nodes[0].container.imge: unknown key 'imge'; did you mean 'image'? "
            "allowed keys: gpus, image, mounts, options, runtime, shm_size"
        ],
    ),
    "mount without a target": (
        """\
        cluster: demo
        defaults:
          container:
            runtime: podman
            image: i
            mounts:
              - /data:/data
              - /data
              - /scratch:scratch:ro
        nodes:
          - host: n1
        """,
        [
            "inv.yaml:8: defaults.container.mounts[1]: got '/data'; a mount is SRC:DST or "
            "SRC:DST:ro, DST an absolute path in the container (options: ro, rw, z, Z)",
            "inv.yaml:9: defaults.container.mounts[2]: got '/scratch:scratch:ro'; a mount is",
        ],
    ),
    "an option rtk sets itself": (
        """\
        cluster: demo
        nodes:
          - host: n1
            container:
              runtime: docker
              image: i
              options: [--privileged, --network=bridge]
        """,
        [
            "inv.yaml:7: nodes[0].container.options[1]: got '--network=bridge'; rtk runs it "
            "with the host's network, so it may not appear here"
        ],
    ),
    "no image anywhere, said once for the defaults": (
        """\
        cluster: demo
        defaults:
          container:
            runtime: docker
        nodes:
          - host: n1
          - host: n2
        """,
        [
            "inv.yaml:3: defaults.container: image missing; a container needs a runtime "
            "(docker or podman; apptainer or pyxis under SLURM) and an image, here or in "
            "defaults.container"
        ],
    ),
    "no runtime for the node that sets its container": (
        """\
        cluster: demo
        nodes:
          - host: n1
          - host: n2
            container:
              image: i
        """,
        ["inv.yaml:5: nodes[1].container: runtime missing; a container needs a runtime"],
    ),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_mistake_gets_its_line_and_key_path(case: str, tmp_path: Path) -> None:
    text, expected = MISTAKES[case]
    problems = load_text(tmp_path, text)
    assert len(problems) == len(expected), problems
    for got, want in zip(problems, expected, strict=True):
        assert got.startswith(want), f"\n got: {got}\nwant: {want}"


def test_check_shows_each_nodes_container(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INHERITED)
    done = rtk("inventory", "check", str(path))
    assert done.returncode == 0, done.stderr
    assert "gpus=8  docker rtk-ray:1" in done.stdout
    assert "gpus=0  podman rtk-ray:1" in done.stdout
    data = json.loads(rtk("inventory", "check", str(path), "--json").stdout)
    assert data["nodes"][1]["container"]["shm_size_bytes"] == 16 * 1024**3
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: demo\nnodes:\n  - host: n1\n    container: {runtime: lxc}\n")
    done = rtk("inventory", "check", str(bad))
    assert done.returncode == 3
    assert f"{bad}:4: nodes[0].container.runtime: got 'lxc'" in done.stderr


def test_schema_describes_the_container_section() -> None:
    done = rtk("inventory", "schema")
    schema = json.loads(done.stdout)
    container = schema["$defs"]["ContainerSettings"]
    assert set(container["properties"]) == {
        "runtime",
        "image",
        "mounts",
        "options",
        "gpus",
        "shm_size",
    }
    assert container["additionalProperties"] is False
    runtime = container["properties"]["runtime"]["anyOf"][0]
    assert runtime["enum"] == ["docker", "podman", "apptainer", "pyxis"]
    assert "container" in schema["$defs"]["NodeSettings"]["properties"]
