"""The inventory's fan-out settings: defaults, and a mistake named by its key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import InventoryError
from toolkit.inventory import load_inventory
from toolkit.inventory.models import MAX_PARALLEL, MAX_START_WAVE

BASE = "cluster: demo\nnodes:\n  - host: gpu01\n"


def load(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "inv.yaml"
    path.write_text(BASE + text)
    with pytest.raises(InventoryError) as raised:
        load_inventory(path)
    return [line for line in str(raised.value).splitlines() if line.strip()]


def test_defaults_and_values_given(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(BASE)
    inv = load_inventory(path)
    assert inv.fanout.parallel == 256
    assert (inv.ray.start_wave, inv.ray.start_wave_interval_s) == (64, 0.5)
    path.write_text(
        BASE + "fanout:\n  parallel: 16\nray:\n  start_wave: 8\n  start_wave_interval_s: 2\n"
    )
    inv = load_inventory(path)
    assert inv.fanout.parallel == 16
    assert (inv.ray.start_wave, inv.ray.start_wave_interval_s) == (8, 2.0)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("fanout:\n  parallel: 0\n", "inv.yaml:5: fanout.parallel: got 0; expected greater than"),
        (
            f"fanout:\n  parallel: {MAX_PARALLEL + 1}\n",
            f"inv.yaml:5: fanout.parallel: got {MAX_PARALLEL + 1}; expected less than or equal "
            f"to {MAX_PARALLEL}",
        ),
        ("fanout:\n  parallel: many\n", "inv.yaml:5: fanout.parallel: got 'many'; expected"),
        ("fanout:\n  paralel: 8\n", "inv.yaml:5: fanout.paralel: unknown key 'paralel'"),
        (
            f"ray:\n  start_wave: {MAX_START_WAVE * 2}\n",
            f"inv.yaml:5: ray.start_wave: got {MAX_START_WAVE * 2}; expected less than",
        ),
        ("ray:\n  start_wave: 0\n", "inv.yaml:5: ray.start_wave: got 0; expected greater"),
        (
            "ray:\n  start_wave_interval_s: 0\n",
            "inv.yaml:5: ray.start_wave_interval_s: got 0; expected greater than 0",
        ),
        (
            "ray:\n  start_wave_interval_s: 600\n",
            "inv.yaml:5: ray.start_wave_interval_s: got 600; expected less than or equal to 60",
        ),
    ],
)
def test_a_bad_value_is_named_by_its_key(tmp_path: Path, text: str, want: str) -> None:
    problems = load(tmp_path, text)
    # One line: the file and line, the key path, the value given and what is allowed.
    assert len(problems) == 1, problems
    assert Path(problems[0]).name.startswith(want), problems
