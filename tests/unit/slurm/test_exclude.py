"""``rtk sbatch --exclude``: the nodes a preflight named become ``#SBATCH --exclude=<hostlist>``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import rtk

from toolkit.inventory import expand_hosts, load_inventory
from toolkit.inventory.hostrange import compress_hosts
from toolkit.preflight.result import PreflightReport
from toolkit.rundir.preflight import Check
from toolkit.slurm.batch_options import SbatchOptionError, merge_options
from toolkit.slurm.sbatch_script import render_script

INVENTORY = """\
cluster: h100
nodes:
  - host: gpu[01-04]
    gpus: 8
"""


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpu.yaml"
    path.write_text(INVENTORY)
    monkeypatch.chdir(tmp_path)
    return path


def sbatch_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def test_the_exclude_directive_is_one_compressed_hostlist(inventory: Path, tmp_path: Path) -> None:
    options = merge_options(
        load_inventory(inventory), {"exclude": ("gpu07", "gpu05", "gpu06", "login1", "gpu10")}
    )
    script = render_script("cluster", INVENTORY, "gpu.yaml", options)
    lines = sbatch_lines(script)
    assert "#SBATCH --exclude=gpu[05-07,10],login1" in lines
    assert lines.index("#SBATCH --exclude=gpu[05-07,10],login1") == len(lines) - 2  # before signal
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert not any("--exclude" in line for line in sbatch_lines(_plain(inventory)))


def _plain(inventory: Path) -> str:
    options = merge_options(load_inventory(inventory), {})
    return render_script("cluster", INVENTORY, "gpu.yaml", options)


def test_an_unsafe_name_or_an_exclude_through_sbatch_arg_is_refused(inventory: Path) -> None:
    inv = load_inventory(inventory)
    with pytest.raises(SbatchOptionError, match="--exclude: got 'gpu1\\\\n#SBATCH --x'"):
        merge_options(inv, {"exclude": ("gpu1\n#SBATCH --x",)})
    with pytest.raises(SbatchOptionError, match="rtk writes --exclude itself; use rtk's --exclude"):
        merge_options(inv, {"extra_args": ("--exclude=gpu01",)})


def test_the_cli_takes_names_ranges_and_a_preflight_json(inventory: Path, tmp_path: Path) -> None:
    checks = [
        Check("host.dev_shm", "gpu01", "pass", "64 GiB"),
        Check("gpu.count", "gpu03", "fail", "7 GPUs"),
        Check("gpu.count", "gpu01", "fail", "6 GPUs"),  # the head: SLURM may leave it out
    ]
    report = tmp_path / "preflight.json"
    report.write_text(json.dumps(PreflightReport("h100", checks, head="gpu01").to_json()))
    listed = tmp_path / "bad.txt"
    listed.write_text("gpu[11-12]  # flaky fans\n")
    done = rtk(
        "sbatch", "render", "gpu.yaml", "--exclude", "gpu04", "--exclude-file", str(report),
        "--exclude-file", str(listed),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --exclude=gpu[01,03-04,11-12]" in sbatch_lines(done.stdout)

    bad = rtk("sbatch", "render", "gpu.yaml", "--exclude", "gpu[3-1]")
    assert bad.returncode == 2
    assert bad.stderr == "rtk: --exclude: 'gpu[3-1]': range '3-1' runs backwards\n"


@pytest.mark.parametrize(
    "names",
    [
        ["node3", "node4", "node5"],
        ["gpu09", "gpu10", "gpu08", "gpu12"],
        ["n9", "n10", "n11", "login", "n9"],
        ["a1-b2", "a1-b3", "x"],
        ["node0", "node1", "node007"],
    ],
)
def test_compressed_hostlists_expand_back_to_the_names(names: list[str]) -> None:
    text = compress_hosts(names)
    assert sorted(expand_hosts(text)) == sorted(set(names))
    assert len(text) <= len(",".join(names))
