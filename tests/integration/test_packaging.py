"""A plain (non-editable) install carries templates/ and sbatch/ and works from them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, require


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import hatchling  # noqa: F401
    except ImportError:
        require(False, "hatchling (the build backend) is not installed: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("rtk-*.whl")
    return found


def test_wheel_contains_templates_and_sbatch(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for template in (REPO / "templates").iterdir():
        assert f"toolkit/_data/templates/{template.name}" in names
    for sbatch in (REPO / "sbatch").iterdir():
        assert f"toolkit/_data/sbatch/{sbatch.name}" in names
    assert "toolkit/node/agent.py" in names


def test_installed_wheel_finds_its_files(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import toolkit.resources as r; print(r.data_dir('templates')); print(r.data_dir('sbatch'))",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    templates, sbatch = done.stdout.split()
    assert templates == str(target / "toolkit" / "_data" / "templates")
    assert sbatch == str(target / "toolkit" / "_data" / "sbatch")
    # The dry-run renders the env file from the packaged template.
    plan = subprocess.run(
        [sys.executable, "-m", "toolkit", "up", "--local", "--dry-run"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert plan.returncode == 0, plan.stderr
    assert "# Written by rtk for cluster local" in plan.stdout
    # The batch scripts render from the packaged sbatch templates.
    (tmp_path / "inv.yaml").write_text("cluster: w\nnodes:\n  - host: n[1-2]\n")
    script = subprocess.run(
        [sys.executable, "-m", "toolkit", "sbatch", "render", "inv.yaml", "--template", "train"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert script.returncode == 0, script.stderr
    assert "#SBATCH --nodes=2" in script.stdout and " train --slurm " in script.stdout
