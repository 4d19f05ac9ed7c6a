"""YAML that could crash or exhaust the loader gets one line naming the problem.

Found by the property tests (tests/unit/properties/); each case here is a plain
example so that it stays covered whatever Hypothesis generates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolkit.errors import InventoryError
from toolkit.inventory.loader import parse_inventory
from toolkit.inventory.resolved import Inventory
from toolkit.inventory.yamlmap import MAX_DEPTH, load_located

NODE = "nodes: [{host: n1}]\n"


def parse(text: str) -> Inventory:
    return parse_inventory(text, "inv.yaml", Path("/nonexistent"))


def problems(text: str) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        parse(text)
    return [str(p) for p in caught.value.problems]


BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else 'x, x, x, x, x, x, x, x, x'}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e"], "abcdef", strict=True)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: &a [*a]\n",
            "inv.yaml:1: not valid YAML: an alias refers to a collection that contains it",
        ),
        (
            "a: &a {b: *a}\n",
            "inv.yaml:1: not valid YAML: an alias refers to a collection that contains it",
        ),
        (BOMB, "inv.yaml:1: not valid YAML: more than 100,000 values (anchors and aliases count"),
        (
            "a: " + "[" * 5000 + "]" * 5000 + "\n",
            "inv.yaml:1: not valid YAML: nested deeper than 64",
        ),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "inv.yaml:1: not valid YAML: nested deeper than 64"),
        ("? [a]\n: 1\n", "inv.yaml:1: not valid YAML: a key must be a plain value such as a name"),
        (
            "? {a: 1}\n: 1\n",
            "inv.yaml:1: not valid YAML: a key must be a plain value such as a name",
        ),
        ("cluster: !foo c\n", "inv.yaml:1: not valid YAML: unknown tag '!foo'; remove it"),
        ("cluster: !foo {a: 1}\n", "inv.yaml:1: not valid YAML: unknown tag '!foo'; remove it"),
        ("cluster: !!int abc\n", "inv.yaml:1: not valid YAML: cannot read 'abc' as int"),
        ("cluster: !!int ''\n", "inv.yaml:1: not valid YAML: cannot read '' as int"),
        ("cluster: !!set x\n", "inv.yaml:1: not valid YAML: cannot read 'x' as set"),
        ("cluster: !!omap x\n", "inv.yaml:1: not valid YAML: cannot read 'x' as omap"),
        ("cluster: !!bool maybe\n", "inv.yaml:1: not valid YAML: cannot read 'maybe' as bool"),
        ("cluster: !!timestamp x\n", "inv.yaml:1: not valid YAML: cannot read 'x' as timestamp"),
        ("a: {<<: 3}\n", "inv.yaml:1: not valid YAML: a merge key (<<) takes a mapping or a list"),
    ],
)
def test_hostile_yaml_is_one_problem(text: str, expected: str) -> None:
    got = problems(text)
    assert len(got) == 1 and got[0].startswith(expected), got


def test_deep_nesting_is_refused_whatever_the_recursion_limit() -> None:
    """A library may raise the interpreter's limit (torch's compiler does): the refusal
    of thousands of levels must not depend on it."""
    deep = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    limit = sys.getrecursionlimit()
    try:
        for allowed in (limit, 100_000):
            sys.setrecursionlimit(allowed)
            (problem,) = problems(deep)
            assert problem.startswith("inv.yaml:1: not valid YAML: nested deeper than 64")
    finally:
        sys.setrecursionlimit(limit)


def test_nesting_up_to_the_limit_is_read() -> None:
    depth = MAX_DEPTH - 1
    assert load_located("[" * depth + "]" * depth).data is not None


def test_a_date_that_is_no_date_stays_text() -> None:
    # YAML 1.1 reads 2024-02-30 as a timestamp, and PyYAML's constructor then raises.
    inv = parse(f"cluster: c\n{NODE}defaults: {{env: {{DAY: 2024-02-30}}}}\n")
    assert inv.nodes[0].env["DAY"] == "2024-02-30"


def test_merge_keys_merge_as_yaml_says() -> None:
    inv = parse(
        "cluster: c\n"
        "nodes:\n"
        "  - &gpu {host: a, gpus: 8, cpus: 96}\n"
        "  - {<<: *gpu, host: b}\n"  # the node's own key wins over the merged one
        "  - {<<: [{gpus: 4}, *gpu], host: c}\n"  # the first mapping listed wins
    )
    assert [(n.name, n.gpus, n.cpus) for n in inv.nodes] == [
        ("a", 8, 96),
        ("b", 8, 96),
        ("c", 4, 96),
    ]


def test_a_merged_key_is_no_duplicate_but_a_repeated_one_is() -> None:
    text = (
        "cluster: c\nnodes:\n  - &n {host: a, gpus: 1}\n  - {<<: *n, host: b, gpus: 2, gpus: 3}\n"
    )
    assert problems(text) == [
        "inv.yaml:4: nodes[1].gpus: key given twice (also on line 4); keep one"
    ]


def test_a_merged_mistake_names_the_line_of_its_anchor() -> None:
    text = "cluster: c\nnodes:\n  - &n {host: a, gpu: 1}\n  - {<<: *n, host: b}\n"
    got = problems(text)
    assert got[0].startswith("inv.yaml:3: nodes[0].gpu: unknown key 'gpu'")
    assert got[1].startswith("inv.yaml:3: nodes[1].gpu: unknown key 'gpu'")


@pytest.mark.parametrize("word", ["=", "<<"])
def test_a_plain_value_whose_yaml_tag_builds_nothing_is_text(word: str) -> None:
    # = and << resolve to YAML's value and merge tags; a user name "=" is still text.
    inv = parse(f"cluster: c\n{NODE}defaults: {{ssh: {{user: {word}}}}}\n")
    assert inv.nodes[0].ssh.user == word
