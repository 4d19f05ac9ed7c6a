"""YAML 1.1's implicit typing never silently changes text the user wrote.

Text fields get the scalar as written (``host: 0123``, ``slurm.time: 1:30:00``);
env values too, except true/false ("1"/"0"), while yes/no/on/off and null are
refused with how to quote them; number fields refuse octal ``010`` and base-60
``1:30``. See ``toolkit/inventory/yaml_text.py`` for why each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import ExperimentError, InventoryError
from toolkit.inventory.loader import parse_inventory
from toolkit.inventory.resolved import Inventory
from toolkit.profile.experiment import load_experiment


def inventory(text: str) -> Inventory:
    return parse_inventory("cluster: c\n" + text, "inv.yaml", Path("/nonexistent"))


def env_of(value: str) -> str:
    return (
        inventory(f"nodes: [{{host: n1}}]\ndefaults:\n  env:\n    A: {value}\n").nodes[0].env["A"]
    )


def problems(text: str) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        inventory(text)
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize(
    "value",
    # sexagesimal, octal, hex, a float that YAML shortens, dates, .inf, underscores
    ["1:30", "010", "0x1F", "3.10", "1.0e3", "2024-01-01", "2024-01-01 10:00:00", ".inf"]
    + ["1_000", "0o17", "1e3", "4", "-7"],
)
def test_an_env_value_is_the_text_as_written(value: str) -> None:
    assert env_of(value) == value


def test_env_true_and_false_are_1_and_0_as_documented() -> None:
    assert [env_of(v) for v in ("true", "True", "FALSE")] == ["1", "1", "0"]


@pytest.mark.parametrize("value", ["yes", "no", "on", "Off", "YES"])
def test_env_yes_no_on_off_are_refused_with_how_to_quote(value: str) -> None:
    got = problems(f"nodes: [{{host: n1}}]\ndefaults:\n  env:\n    A: {value}\n")
    assert got == [
        f"inv.yaml:5: defaults.env.A: {value} is a YAML 1.1 boolean; write 1 or 0 (or "
        f'true/false) for a switch, or quote it for the text: A: "{value}"'
    ]


@pytest.mark.parametrize("value", ["", "~", "null"])
def test_an_env_value_left_empty_is_refused_with_how_to_write_empty(value: str) -> None:
    got = problems(f"nodes: [{{host: n1, env: {{A: {value}}}}}]\n")
    assert got == [
        "inv.yaml:2: nodes[0].env.A: no value (YAML reads ~, null and nothing as none); write "
        'A: "" for an empty value, or quote the text'
    ]


def test_quoted_values_stay_as_they_were() -> None:
    assert env_of('"1:30"') == "1:30"
    assert env_of("'yes'") == "yes"
    assert env_of('""') == ""


def test_text_fields_keep_the_text_yaml_would_have_turned_into_numbers() -> None:
    inv = inventory(
        "nodes:\n  - {host: 0123, address: 010, ssh: {user: 1234}, python: 3.10}\n"
        "slurm: {time: 1:30:00, partition: 010, job_name: 2024-01-01, account: yes}\n"
        "network: {interface: 0x1F}\n"
    )
    node = inv.nodes[0]
    assert (node.name, node.address, node.ssh.user, node.python) == ("0123", "010", "1234", "3.10")
    assert (inv.slurm.time, inv.slurm.partition) == ("1:30:00", "010")
    assert (inv.slurm.job_name, inv.slurm.account) == ("2024-01-01", "yes")
    assert inv.network.interface == "0x1F"


def test_an_unset_optional_text_field_stays_unset() -> None:
    assert (
        inventory("nodes: [{host: n1}]\nslurm: {partition: ~, account: }\n").slurm.partition is None
    )


def test_keys_that_want_text_keep_it() -> None:
    inv = inventory("nodes: [{host: n1, resources: {2024-01-01: 1, 010: 2}}]\n")
    assert inv.nodes[0].resources == {"2024-01-01": 1.0, "010": 2.0}
    assert problems("nodes: [{host: n1, env: {010: x}}]\n") == [
        "inv.yaml:2: nodes[0].env.010: got '010'; a variable name is letters, digits and '_', "
        "not starting with a digit"
    ]


def test_number_fields_refuse_octal_and_base_60_with_the_number_to_write() -> None:
    assert problems("nodes: [{host: n1, gpus: 010}]\n") == [
        "inv.yaml:2: nodes[0].gpus: 010 reads as 8 in YAML 1.1 (octal); write 10 if you mean "
        "10, or 8 for 8"
    ]
    assert problems("nodes: [{host: n1}]\nports: {gcs: 1:30}\n") == [
        "inv.yaml:3: ports.gcs: 1:30 reads as 90 in YAML 1.1 (base 60); write the number in "
        "decimal digits"
    ]
    inv = inventory("nodes: [{host: n1, gpus: 0x8, cpus: 1_0}]\n")  # chosen spellings stay
    assert (inv.nodes[0].gpus, inv.nodes[0].cpus) == (8, 10)


def test_text_with_a_nul_character_is_refused() -> None:
    assert problems('nodes: [{host: n1, python: "/usr/bin/py\\0thon"}]\n') == [
        "inv.yaml:2: nodes[0].python: contains a NUL character (\\0), which no path, command "
        "line or environment can hold"
    ]


def test_an_explicit_tag_is_not_undone() -> None:
    # !!binary asked for bytes: the cluster name is then not text, and says so.
    got = problems("nodes: [{host: n1}]\ncluster: !!binary aGVsbG8=\n")
    assert got[-1].startswith("inv.yaml:3: cluster: got b'hello'; expected a valid string")


def test_the_experiment_file_keeps_text_too(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "name: 2024-01-01\ninventory: 010\nworkload:\n  command: [python, run.py, --lr, 1.0e-4]\n"
    )
    experiment = load_experiment(path)
    assert experiment.spec.name == "2024-01-01"
    assert experiment.inventory_path == tmp_path / "010"
    assert experiment.spec.workload.command == ["python", "run.py", "--lr", "1.0e-4"]
    path.write_text("name: a\ninventory: i.yaml\nrepeats: 010\nworkload: {command: [x]}\n")
    with pytest.raises(ExperimentError, match=r"sweep.yaml:3: repeats: 010 reads as 8"):
        load_experiment(path)
