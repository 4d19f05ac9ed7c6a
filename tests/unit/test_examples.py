"""Every file in examples/ is valid as rtk reads it, so users can start from it.

Inventories go through the inventory loader, the plan ``rtk up --dry-run`` prints
and ``rtk inventory check``; the SLURM one also through ``rtk sbatch``'s options and
script and the cluster ``--slurm`` derives from an allocation; the sweep through the
experiment loader, with its inventory and node counts as ``rtk profile`` resolves
them. No cluster is needed. (inventory.example.yaml, the key-by-key reference, has
its own test: tests/unit/test_example_inventory.py.)
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import REPO

from toolkit.cli import cli
from toolkit.cluster.plan import build_plan
from toolkit.cluster.plan_text import render_up
from toolkit.flows.sweep_plan import subset
from toolkit.inventory import Inventory, load_inventory
from toolkit.profile.experiment import CLUSTER_AXES, load_experiment
from toolkit.slurm.allocation import Allocation, slurm_inventory
from toolkit.slurm.batch_options import merge_options
from toolkit.slurm.sbatch_script import render_script
from toolkit.train.config import TrainConfig

ROOT = REPO
EXAMPLES = ROOT / "examples"
FILES = sorted(p for p in EXAMPLES.iterdir() if p.is_file())


def kind(path: Path) -> str:
    """``inventory`` or ``experiment``, from the file's top-level keys."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name}: not a YAML mapping"
    if "cluster" in data:
        return "inventory"
    if "workload" in data:
        return "experiment"
    raise AssertionError(f"{path.name}: neither an inventory (cluster:) nor a sweep (workload:)")


INVENTORIES = [p for p in FILES if p.suffix == ".yaml" and kind(p) == "inventory"]
EXPERIMENTS = [p for p in FILES if p.suffix == ".yaml" and kind(p) == "experiment"]


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_the_promised_examples_are_there_and_nothing_else() -> None:
    assert _ids(FILES) == ["single-gpu.yaml", "slurm-inventory.yaml", "sweep.yaml"]
    assert _ids(INVENTORIES) == ["single-gpu.yaml", "slurm-inventory.yaml"]
    assert _ids(EXPERIMENTS) == ["sweep.yaml"]


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_every_example_opens_with_comments_for_its_reader(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [line for line in lines[:40] if line.startswith("#")]
    assert lines[0].startswith("# rtk "), lines[0]
    assert len(header) >= 5, f"{path.name}: say what it is for and how to use it"
    # Each shows the commands that take it, with its path as a user in the repo types it.
    assert f"examples/{path.name}" in "\n".join(header)


@pytest.mark.parametrize("path", INVENTORIES, ids=_ids(INVENTORIES))
def test_inventory_loads_plans_and_passes_rtk_inventory_check(path: Path) -> None:
    inv = load_inventory(path)
    plan = build_plan(inv)
    assert f"cluster {inv.name!r}" in render_up(plan)
    done = CliRunner().invoke(cli, ["inventory", "check", str(path)])
    assert done.exit_code == 0, done.output
    assert f"{path}: ok: cluster {inv.name}" in done.output


def test_single_gpu_is_this_machine_with_one_gpu() -> None:
    inv = load_inventory(EXAMPLES / "single-gpu.yaml")
    assert inv.transport == "local"
    assert [(n.name, n.address, n.gpus) for n in inv.nodes] == [("localhost", "127.0.0.1", 1)]
    assert inv.dashboard_host == "127.0.0.1"
    assert inv.ray.auth == "token"


@pytest.fixture(scope="module")
def slurm_inv() -> Inventory:
    return load_inventory(EXAMPLES / "slurm-inventory.yaml")


def test_slurm_inventory_gives_the_jobs_options(slurm_inv: Inventory) -> None:
    options = merge_options(slurm_inv, {})
    directives = options.directives()
    for wanted in (
        "--nodes=4",
        "--partition=gpu",
        "--account=my-account",
        "--time=04:00:00",
        "--gpus-per-node=8",
        "--job-name=rtk-llm",
    ):
        assert wanted in directives, directives
    # The command line wins over the file, as its comments say.
    assert "--nodes=8" in merge_options(slurm_inv, {"nodes": 8}).directives()
    text = (EXAMPLES / "slurm-inventory.yaml").read_text(encoding="utf-8")
    for template in ("cluster", "train"):
        script = render_script(template, text, "examples/slurm-inventory.yaml", options)
        assert script.startswith("#!"), script[:80]
        assert "#SBATCH --nodes=4" in script


def test_slurm_inventory_becomes_the_allocations_cluster(slurm_inv: Inventory) -> None:
    # Allocated nodes inside the listed range and one outside it (first entry's settings).
    hosts = ("gpu007", "gpu008", "gpu031", "gpu200")
    inv = slurm_inventory(slurm_inv, Allocation("123456", hosts, 8), resolve=lambda h: "10.1.0.9")
    assert inv.name == "llm-123456"
    assert inv.transport == "srun"
    assert inv.head_name == "gpu007"
    assert [n.gpus for n in inv.nodes] == [8, 8, 8, 8]
    assert {n.python for n in inv.nodes} == {"/shared/envs/rtk/bin/python"}
    assert inv.temp_dir == "/tmp/rtk-123456"
    assert len(build_plan(inv).nodes) == 4


@pytest.mark.parametrize("path", EXPERIMENTS, ids=_ids(EXPERIMENTS))
def test_sweep_loads_with_its_inventory_and_plans_every_run(path: Path) -> None:
    experiment = load_experiment(path)
    assert experiment.inventory_path.parent == EXAMPLES
    inventory = load_inventory(experiment.inventory_path)
    spec = experiment.spec
    runs = experiment.runs()
    assert len(runs) == spec.repeats * math.prod(len(v) for v in spec.axes.values())
    assert len({r.dir_name for r in runs}) == len(runs)
    for run in runs:
        # As rtk profile does per run: the node subset, then the trainer's options.
        count = int(run.axes.get("nodes", len(inventory.nodes)))
        assert len(subset(inventory, count).nodes) == count
        if spec.workload.train is not None:
            options = experiment.train_options(run.axes)
            assert not set(options) & set(CLUSTER_AXES)
            TrainConfig(run_dir="-", **options).check()


def _doc_block_after(doc: str, marker: str) -> str:
    text = (ROOT / doc).read_text(encoding="utf-8")
    after = text[text.index(marker) :]
    match = re.search(r"```yaml\n(.*?)```", after, re.DOTALL)
    assert match, f"no yaml block after {marker!r} in {doc}"
    return match.group(1)


def test_the_sweep_doc_shows_the_sweep_file_as_it_is() -> None:
    shown = yaml.safe_load(_doc_block_after("docs/sweeps.md", "# Power-profiling sweeps"))
    assert shown == yaml.safe_load((EXAMPLES / "sweep.yaml").read_text(encoding="utf-8"))


def test_readme_names_every_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in FILES if f"examples/{p.name}" not in readme]
    assert not missing, f"README.md does not mention: {', '.join(missing)}"


def test_examples_ship_in_the_sdist() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "examples" in pyproject["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]
