"""Ray's srun step in a pyxis or apptainer container, run against fake srun and apptainer.

Pyxis and enroot are not packaged for Debian, and apptainer is not in Debian 12, so
no real container starts here: ``srun``, ``apptainer`` and ``ray`` on PATH are small
scripts that record their arguments and then do what the real ones would with the
command (srun runs ``bash -c``, apptainer runs ``sh -c``, ray prints that it started
and blocks). The plan's start command runs through the real srun transport, so the
recorded argv is what a job would run.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import stat
from pathlib import Path

import pytest

from toolkit.cluster.containers.docker import check_startable
from toolkit.cluster.plan import RAY_READY_TEXT, build_plan
from toolkit.errors import ClusterError
from toolkit.inventory import Inventory, load_inventory
from toolkit.slurm.allocation import Allocation, job_ports, slurm_inventory
from toolkit.transport import SrunTransport

PLAIN = """\
cluster: nemo
nodes:
  - host: gpu[01-02]
    gpus: 4
"""
PYXIS = """\
cluster: nemo
defaults:
  container:
    runtime: pyxis
    image: nvcr.io#nvidia/pytorch:25.02-py3
    mounts: [/lustre/data:/data:ro, "/lustre/ckpt:/ckpt:rw,z"]
nodes:
  - host: gpu[01-02]
    gpus: 4
"""
APPTAINER = PYXIS.replace("pyxis", "apptainer").replace(
    "nvcr.io#nvidia/pytorch:25.02-py3", "/shared/images/ray.sif"
)
JOB = "4242"

# Each records its argv (NUL-separated) in $RTK_FAKE_LOG/<name>.argv, then acts.
FAKES = {
    "srun": 'printf "%s\\0" "$@" > "$RTK_FAKE_LOG/srun.argv"\n'
    'while [ "$1" != bash ]; do shift; done\nexec "$@"\n',
    "apptainer": 'printf "%s\\0" "$@" > "$RTK_FAKE_LOG/apptainer.argv"\n'
    'while [ "$1" != sh ]; do shift; done\nexec "$@"\n',
    "ray": 'printf "%s\\0" "$@" > "$RTK_FAKE_LOG/ray.argv"\necho $$ > "$RTK_FAKE_LOG/ray.pid"\n'
    'echo "Ray runtime started."\nfor a in "$@"; do [ "$a" = --block ] && exec sleep 60; done\n',
}


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake srun, apptainer and ray first on PATH; their records go to the returned dir."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("RTK_FAKE_LOG", str(log))
    return log


def job_inventory(text: str, tmp_path: Path) -> Inventory:
    """The inventory as ``--slurm`` makes it in job 4242, Ray's temp dir under tmp_path."""
    (tmp_path / "inv.yaml").write_text(text)
    inv = slurm_inventory(
        load_inventory(str(tmp_path / "inv.yaml")),
        Allocation(JOB, ("gpu01", "gpu02"), 4),
        resolve=lambda host: "10.0.0.1",
    )
    return dataclasses.replace(
        inv, ray=inv.ray.model_copy(update={"temp_dir": str(tmp_path / "t")})
    )


def recorded(log: Path, name: str) -> list[str]:
    return (log / f"{name}.argv").read_text().split("\0")[:-1]


def start_head(inv: Inventory, tmp_path: Path, log: Path) -> list[str]:
    """Start the head's Ray step through the srun transport; its srun argv."""
    plan = build_plan(inv)
    head = plan.head
    env_file = Path(plan.paths.env_file)
    env_file.parent.mkdir(parents=True)
    env_file.write_text("RTK_NODE_IP=10.0.0.1\n")
    transport = SrunTransport(JOB, tmp_path / "srun-logs")
    try:
        result = transport.start_daemon(
            head.node, head.start_command, RAY_READY_TEXT, 20, step_options=head.start_step_options
        )
        assert result.ok, result.stdout
    finally:
        pid_file = log / "ray.pid"
        if pid_file.exists():
            os.killpg(os.getpgid(int(pid_file.read_text())), signal.SIGTERM)
    return recorded(log, "srun")


def check_ray(log: Path) -> None:
    ray = recorded(log, "ray")
    ports = job_ports(JOB)
    assert ray[:2] == ["start", "--head"]
    assert f"--port={ports.gcs}" in ray and f"--min-worker-port={ports.min_worker}" in ray
    assert ray[-2:] == ["--node-ip-address=10.0.0.1", "--block"]


def test_pyxis_puts_the_container_on_the_srun_step(
    fakes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = job_inventory(PYXIS, tmp_path)
    srun = start_head(inv, tmp_path, fakes)
    temp = str(tmp_path / "t")
    options = srun[: srun.index("bash")]
    assert options[-3:] == [
        "--container-image=nvcr.io#nvidia/pytorch:25.02-py3",
        f"--container-mounts={temp}:{temp},{temp}/rtk:{temp}/rtk:ro,"
        "/lustre/data:/data:ro,/lustre/ckpt:/ckpt:rw",
        f"--container-name=rtk-nemo-{JOB}",
    ]
    assert "--nodelist=gpu01" in options and f"--jobid={JOB}" in options
    assert not (fakes / "apptainer.argv").exists()
    check_ray(fakes)


def test_apptainer_wraps_ray_start_in_the_step(fakes: Path, tmp_path: Path) -> None:
    inv = job_inventory(APPTAINER, tmp_path)
    srun = start_head(inv, tmp_path, fakes)
    temp = str(tmp_path / "t")
    assert not [word for word in srun if word.startswith("--container")]
    apptainer = recorded(fakes, "apptainer")
    assert apptainer[:6] == [
        "exec",
        "--nv",
        "--bind",
        f"{temp}:{temp},{temp}/rtk:{temp}/rtk:ro,/lustre/data:/data:ro,/lustre/ckpt:/ckpt:rw",
        "/shared/images/ray.sif",
        "sh",
    ]
    check_ray(fakes)


def test_without_gpus_apptainer_gets_no_nv(tmp_path: Path) -> None:
    inv = job_inventory(APPTAINER.replace("gpus: 4", "gpus: 0"), tmp_path)
    inv = dataclasses.replace(inv, nodes=tuple(dataclasses.replace(n, gpus=0) for n in inv.nodes))
    assert " --nv " not in build_plan(inv).head.start_command


def test_ports_per_job_are_unchanged_by_a_container(tmp_path: Path) -> None:
    plain = build_plan(job_inventory(PLAIN, tmp_path))
    assert plain.inventory.ports == build_plan(job_inventory(PYXIS, tmp_path)).inventory.ports


def test_docker_under_slurm_and_shm_size_in_a_step_are_refused(tmp_path: Path) -> None:
    for text, why in (
        (PYXIS.replace("pyxis", "docker"), "a SLURM job runs Ray's step in pyxis or apptainer"),
        (PYXIS.replace("    runtime: pyxis", "    runtime: pyxis\n    shm_size: 1g"), "/dev/shm"),
    ):
        inv = job_inventory(text, tmp_path)
        with pytest.raises(ClusterError, match="gpu\\[01-02\\]") as raised:
            check_startable(inv, inv.nodes)
        assert why in str(raised.value)
