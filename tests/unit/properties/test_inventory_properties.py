"""Any inventory text is an inventory or its problems, and a valid one plans only quoted commands.

Properties, tried on hostile input (tests/hostile_input.py):
- every text either loads or raises ``InventoryError``, each problem one line;
- a valid inventory's plan is built, and every command and env file in it, read
  back as a shell reads it (shlex), gives back exactly the values it was built from;
- a YAML 1.1 look-alike (``1:30``, ``010``, ``yes``...) in a text field reaches
  rtk as written, or is refused.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml
from hostile_input import YAML_WORDS, examples, hostile_text, mutate, render_yaml, yaml_values
from hypothesis import event, given, settings
from hypothesis import strategies as st

from toolkit.cluster.plan import (
    SSH_SESSION_VARIABLES,
    STOP_GRACE_S,
    ClusterPlan,
    Detect,
    build_plan,
    fill_env,
)
from toolkit.cluster.plan_text import env_file, render_down, render_up, render_up_summary
from toolkit.errors import InventoryError
from toolkit.inventory.loader import parse_inventory
from toolkit.inventory.models import InventorySpec
from toolkit.inventory.problems import parse_yaml
from toolkit.inventory.resolved import Inventory
from toolkit.inventory.yaml_text import restore_written_text

BASE: dict[str, Any] = {
    "cluster": "hx",
    "transport": "ssh",
    "head": "n1",
    "defaults": {
        "ssh": {"user": "u", "port": 22, "jump_host": "bastion", "connect_timeout_s": 5},
        "venv": "/opt/v",
        "env": {"A": "1"},
    },
    "nodes": [
        {
            "host": "n1",
            "address": "10.0.0.1",
            "gpus": 1,
            "ray": "/opt/v/bin/ray",
            "env": {"B": "x"},
        },
        {
            "host": "w[1-2]",
            "address": "10.0.0.[2-3]",
            "cpus": 4,
            "resources": {"r": 1},
            "python": "/usr/bin/python3",
        },
    ],
    "network": {"profile": "auto", "interface": "eth0", "env": {"NCCL_DEBUG": "WARN"}},
    "ports": {"gcs": 6379},
    "ray": {"temp_dir": "/tmp/rtk-hx", "object_store_memory": "1GB", "dashboard_host": "0.0.0.0"},
    "slurm": {"partition": "gpu", "time": "01:00:00", "job_name": "j", "account": "a"},
    "fanout": {"parallel": 8},
}
HERE = Path("/nonexistent-rtk-inventory-dir")


def load(text: str) -> Inventory | None:
    """The inventory, or None when refused; the refusal must be problems, one line each."""
    try:
        return parse_inventory(text, "inv.yaml", HERE)
    except InventoryError as e:
        assert e.problems, "an InventoryError without a problem"
        for problem in e.problems:
            assert "\n" not in str(problem) and "\r" not in str(problem), str(problem)
        assert e.exit_code == 3
        return None


@settings(max_examples=examples(60))
@given(st.one_of(hostile_text(200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_any_text_is_an_inventory_or_its_problems(text: str) -> None:
    load(text)


@st.composite
def yaml_documents(draw: st.DrawFn) -> str:
    return render_yaml(draw, draw(yaml_values()))


@settings(max_examples=examples(60))
@given(yaml_documents())
def test_any_yaml_is_an_inventory_or_its_problems(text: str) -> None:
    load(text)


@st.composite
def mutated_inventories(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return render_yaml(draw, mutate(draw, BASE))
    # Only free-text values changed, written by PyYAML itself: most of these pass the
    # schema and reach the plan.
    data = json.loads(json.dumps(BASE))
    for path in draw(st.lists(st.sampled_from(FREE_TEXT), min_size=1, max_size=4)):
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = draw(hostile_text())
    return yaml.safe_dump(data, allow_unicode=draw(st.booleans()))


# Keys whose text reaches command lines and env files unchecked (quoted on the way).
FREE_TEXT = [
    ("defaults", "ssh", "user"),
    ("defaults", "ssh", "jump_host"),
    ("defaults", "venv"),
    ("defaults", "env", "A"),
    ("nodes", 0, "ray"),
    ("nodes", 0, "env", "B"),
    ("nodes", 1, "python"),
    ("network", "interface"),
    ("network", "env", "NCCL_DEBUG"),
    ("ray", "dashboard_host"),
    ("ray", "temp_dir"),
]


@settings(max_examples=examples(200))
@given(mutated_inventories())
def test_a_valid_inventory_plans_only_quoted_commands(text: str) -> None:
    inventory = load(text)
    event("valid" if inventory is not None else "refused")
    if inventory is not None:
        check_plan(build_plan(inventory))


def check_plan(plan: ClusterPlan) -> None:
    """Every command of the plan, split as a shell splits it, gives back its values."""
    inv = plan.inventory
    temp_dir = plan.paths.temp_dir
    for node_plan in plan.nodes:
        node = node_plan.node
        ports = ",".join(str(p) for p in node_plan.ports)
        interface = inv.network.interface or ""
        assert shlex.split(node_plan.probe_command) == [
            node.python,
            "-",
            "probe",
            inv.head.address,
            temp_dir,
            ports,
            interface,
        ]
        assert shlex.split(node_plan.stop_command) == [
            node.python,
            "-",
            "stop",
            temp_dir,
            f"{STOP_GRACE_S:g}",
        ]
        assert shlex.split(node_plan.start_command) == [
            *("set", "-a", "&&", ".", plan.paths.env_file, "&&", "set", "+a", "&&"),
            *("unset", *SSH_SESSION_VARIABLES, "&&", "exec"),
            *node_plan.start_argv,
            "--node-ip-address=$RTK_NODE_IP",
        ]
        assert node_plan.start_argv[: len(node.ray)] == node.ray
        facts = {"node_ip": "10.9.9.9", "interface": "eth9"}
        env = fill_env(node_plan, facts)
        assert env == {
            k: facts[v.fact] if isinstance(v, Detect) else v for k, v in node_plan.env.items()
        }
        words = shlex.split(env_file(plan, node_plan, env), comments=True)
        assignments = dict(word.split("=", 1) for word in words)
        assert len(assignments) == len(words), words  # every word is one KEY=value
        path_first = assignments.pop("PATH", None)
        assert assignments == env
        if path_first is not None:
            assert path_first == f"{Path(node.python).parent}${{PATH:+:$PATH}}"
    for text in (render_up(plan), render_up_summary(plan), render_down(plan)):
        assert text.endswith("\n")


TEXT_FIELDS = [
    ("defaults", "ssh", "user"),
    ("defaults", "ssh", "jump_host"),
    ("defaults", "venv"),
    ("nodes", 0, "ray"),
    ("nodes", 1, "python"),
    ("nodes", 0, "env", "B"),
    ("network", "interface"),
    ("network", "env", "NCCL_DEBUG"),
    ("ray", "dashboard_host"),
    ("slurm", "partition"),
    ("slurm", "account"),
    ("slurm", "job_name"),
    ("slurm", "time"),
    ("nodes", 0, "host"),
    ("cluster",),
]


@settings(max_examples=examples(60))
@given(st.sampled_from(TEXT_FIELDS), st.sampled_from(YAML_WORDS))
def test_a_yaml_look_alike_in_a_text_field_is_kept_as_written_or_refused(
    path: tuple[Any, ...], word: str
) -> None:
    lines = []
    for key, value in BASE.items():
        lines.append(f"{key}: {_flow(value, (key,), path, word)}")
    text = "\n".join(lines) + "\n"
    located, _ = parse_yaml(text, "inv.yaml", InventoryError)
    refused = restore_written_text(located, InventorySpec)
    if refused:
        assert [p for p, _ in refused] == [path]
        return
    data = located.data
    for part in path:
        data = data[part]
    if path[-2:-1] in (("env",),) and word.lower() in ("true", "false"):
        assert data is (word.lower() == "true")  # then "1"/"0", as documented
    elif word.lower() in ("~", "null") and path[-2:-1] != ("env",):
        assert data is None  # an optional field left unset
    else:
        assert data == word
    load(text)  # and the whole file is an inventory or its problems


def _flow(value: Any, at: tuple[Any, ...], path: tuple[Any, ...], word: str) -> str:
    if at == path:
        return word
    if isinstance(value, dict):
        items = ", ".join(f"{k}: {_flow(v, (*at, k), path, word)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v, (*at, i), path, word) for i, v in enumerate(value)) + "]"
    return shlex.quote(str(value)) if isinstance(value, str) else str(value)
