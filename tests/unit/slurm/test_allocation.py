"""``--slurm``'s pure parts: the allocation from SLURM's variables, ports per job, the
allocation's inventory and plan, the srun step line and ``rtk up --slurm --dry-run``.

No SLURM controller is needed: ``scontrol show hostnames`` and ``srun --help`` only
read a config file, so the real tools run against a two-line slurm.conf. The dry run
is pinned as whole text (set RTK_UPDATE_GOLDEN=1 to rewrite the golden).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, require, rtk

from toolkit.cluster.connect import make_transport
from toolkit.cluster.plan import build_plan
from toolkit.errors import SlurmError
from toolkit.inventory import Inventory, load_inventory
from toolkit.inventory.models import PortSettings
from toolkit.slurm import allocation
from toolkit.slurm.allocation import (
    FIXED_PORTS,
    PORT_BLOCK,
    PORT_SLOTS,
    Allocation,
    gpus_per_node,
    job_ports,
    read_allocation,
    slurm_inventory,
)
from toolkit.transport import SrunTransport

GOLDEN = REPO / "tests" / "golden"
EPHEMERAL_LOW = 32768  # Linux's default net.ipv4.ip_local_port_range starts here

# The inventory --slurm turns into the allocation's cluster: gpu07 has settings of its
# own, gpu04 is not allocated; fixed python and addresses keep the plan text stable.
INVENTORY = """\
cluster: train
head: gpu07
defaults:
  python: /opt/rtk/bin/python
  env:
    OMP_NUM_THREADS: 8
nodes:
  - host: gpu[01-04]
    address: 10.20.0.[1-4]
    gpus: 4
  - host: gpu07
    address: 10.20.0.7
    gpus: 2
    cpus: 16
    python: /opt/gpu07/bin/python
    resources:
      nvlink: 1
    env:
      NCCL_DEBUG: INFO
ray:
  dashboard_host: 0.0.0.0
  temp_dir: /scratch/ray-temp
"""

# Every SLURM variable rtk reads, blank, so a test run inside a real job sees only its own.
NO_SLURM = {
    key: ""
    for key in (
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "SLURM_GPUS_ON_NODE",
        "SLURM_GPUS_PER_NODE",
        "SLURM_JOB_GPUS_PER_NODE",
        "SLURM_JOB_GPUS",
        "SLURM_STEP_GPUS",
    )
}
JOB_ENV = {
    **NO_SLURM,
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "gpu[01-03,07]",
    "SLURM_GPUS_ON_NODE": "8",
}


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Inventory:
    """INVENTORY loaded from ``inv.yaml`` in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    return load_inventory("inv.yaml")


@pytest.fixture
def slurm_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A minimal slurm.conf in SLURM_CONF: enough for scontrol and srun to parse options."""
    require(shutil.which("scontrol") is not None, "scontrol is needed (slurm-client)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=rtk-test\nSlurmctldHost=localhost\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


@pytest.fixture
def no_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without SLURM's tools."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


# --- read_allocation -----------------------------------------------------------------


@pytest.mark.parametrize("env", [{}, {"SLURM_JOB_ID": "7"}, {"SLURM_JOB_NODELIST": "gpu01"}])
def test_outside_an_allocation_says_what_is_missing_and_how_to_run(env: dict[str, str]) -> None:
    with pytest.raises(SlurmError) as caught:
        read_allocation(env)
    message = str(caught.value)
    assert "SLURM_JOB_ID" in message and "SLURM_JOB_NODELIST" in message
    assert "sbatch" in message and "salloc" in message
    assert caught.value.exit_code == 8


NODELISTS = [
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("x[098-101]", ["x098", "x099", "x100", "x101"]),
    ("cn[001-002],gpu07", ["cn001", "cn002", "gpu07"]),
    ("dgx-a100-[001-002]", ["dgx-a100-001", "dgx-a100-002"]),
    ("node1", ["node1"]),
]


@pytest.mark.parametrize(("nodelist", "hosts"), NODELISTS)
def test_hosts_from_real_scontrol(nodelist: str, hosts: list[str], slurm_conf: Path) -> None:
    done = subprocess.run(
        ["scontrol", "show", "hostnames", "node[1-2]"], capture_output=True, text=True, timeout=30
    )
    require(done.stdout.split() == ["node1", "node2"], f"scontrol cannot run here: {done.stderr}")
    found = read_allocation({"SLURM_JOB_ID": "31", "SLURM_JOB_NODELIST": nodelist})
    assert found == Allocation("31", tuple(hosts), None)


@pytest.mark.parametrize(("nodelist", "hosts"), NODELISTS)
def test_hosts_without_scontrol(nodelist: str, hosts: list[str], no_scontrol: None) -> None:
    found = read_allocation({"SLURM_JOB_ID": "31", "SLURM_JOB_NODELIST": nodelist})
    assert found.hosts == tuple(hosts)


def test_a_hung_scontrol_falls_back_to_rtks_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scontrol retries an unreadable SLURM_CONF for a minute; rtk reads the list itself."""
    require(shutil.which("scontrol") is not None, "scontrol is needed (slurm-client)")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    monkeypatch.setattr(allocation, "SCONTROL_TIMEOUT_S", 0.5)
    found = read_allocation({"SLURM_JOB_ID": "31", "SLURM_JOB_NODELIST": "gpu[01-02]"})
    assert found.hosts == ("gpu01", "gpu02")


def test_legacy_variable_names_and_the_process_environment(
    monkeypatch: pytest.MonkeyPatch, no_scontrol: None
) -> None:
    for key, value in {**NO_SLURM, "SLURM_JOBID": "55", "SLURM_NODELIST": "n[1-2]"}.items():
        monkeypatch.setenv(key, value)
    assert read_allocation() == Allocation("55", ("n1", "n2"), None)


def test_an_unreadable_node_list_is_a_slurm_error(no_scontrol: None) -> None:
    with pytest.raises(SlurmError, match=r"cannot read the node list 'gpu\[03-01\]'"):
        read_allocation({"SLURM_JOB_ID": "31", "SLURM_JOB_NODELIST": "gpu[03-01]"})


# --- gpus_per_node: the values SLURM writes (sbatch(1), srun(1) ENVIRONMENT) -----------

# The batch step of a job run with --gpus-per-node=a100:4, as slurmd hands it over.
BATCH_GPUS = {
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_GPUS_PER_NODE": "a100:4",
    "SLURM_JOB_GPUS": "0,1,2,3",
}


@pytest.mark.parametrize(
    ("env", "gpus"),
    [
        ({"SLURM_GPUS_ON_NODE": "8"}, 8),  # set by slurmd for the batch step and every step
        ({"SLURM_GPUS_PER_NODE": "8"}, 8),  # --gpus-per-node as given: [type:]count
        ({"SLURM_GPUS_PER_NODE": "a100:8"}, 8),
        ({"SLURM_JOB_GPUS": "0,1,2"}, 3),  # global GPU ids of the job on this node
        ({"SLURM_STEP_GPUS": "4,5"}, 2),
        (BATCH_GPUS, 4),
        ({}, None),
        (NO_SLURM, None),
    ],
)
def test_gpus_per_node(env: dict[str, str], gpus: int | None) -> None:
    assert gpus_per_node(env) == gpus
    allocated = read_allocation({**env, "SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n1"})
    assert allocated.gpus_per_node == gpus


# --- job_ports -----------------------------------------------------------------------

JOB_IDS = [str(i) for i in range(2 * PORT_SLOTS)] + ["4242", "123456789", "9999999999"]


def _block(ports: PortSettings) -> range:
    """Every port the settings name, as the range from the lowest to the highest."""
    values = dict(ports).values()
    return range(min(values), max(values) + 1)


@pytest.mark.parametrize("job_id", JOB_IDS)
def test_job_ports_stay_in_one_block_below_the_ephemeral_range(job_id: str) -> None:
    ports = job_ports(job_id)
    every = dict(ports)
    assert set(every) == set(PortSettings.model_fields)  # no port left at Ray's default
    assert all(10000 <= port < EPHEMERAL_LOW for port in every.values())
    fixed = [every[name] for name in FIXED_PORTS]
    assert set(FIXED_PORTS) == set(every) - {"min_worker", "max_worker"}  # each port pinned
    assert len(set(fixed)) == len(FIXED_PORTS)  # and none shared
    workers = range(ports.min_worker, ports.max_worker + 1)
    assert len(workers) > 100
    assert not set(fixed) & set(workers)
    assert len(_block(ports)) <= PORT_BLOCK


def test_consecutive_and_all_slot_distinct_jobs_get_disjoint_blocks() -> None:
    assert not set(_block(job_ports("4242"))) & set(_block(job_ports("4243")))
    blocks = sorted((_block(job_ports(str(i))) for i in range(PORT_SLOTS)), key=lambda b: b.start)
    for low, high in zip(blocks, blocks[1:], strict=False):
        assert low.stop <= high.start


def test_job_ids_equal_modulo_port_slots_share_ports_known_limit() -> None:
    """Known limit: jobs PORT_SLOTS ids apart get the same block (a node shared by both
    then finds the ports busy at the probe)."""
    assert job_ports("4242") == job_ports(str(4242 + PORT_SLOTS))
    assert job_ports("4242") != job_ports("4243")


@pytest.mark.parametrize("job_id", ["0", str(PORT_SLOTS - 1), "4242"])
def test_inventory_validation_accepts_job_ports(job_id: str, tmp_path: Path) -> None:
    """rtk's own port checks (distinct, outside the worker range, below 32768) pass."""
    ports = "".join(f"  {name}: {port}\n" for name, port in dict(job_ports(job_id)).items())
    path = tmp_path / "ports.yaml"
    path.write_text(f"cluster: p\nnodes:\n  - host: n1\nports:\n{ports}")
    assert load_inventory(str(path)).ports == job_ports(job_id)


# --- slurm_inventory and its plan ----------------------------------------------------

ADDRESSES = {"gpu09": "10.30.0.9", "gpu10": "10.30.0.10"}


def test_the_allocation_becomes_the_cluster(inventory: Inventory) -> None:
    job = Allocation("123456", ("gpu09", "gpu07", "gpu10"), gpus_per_node=8)
    inv = slurm_inventory(inventory, job, resolve=ADDRESSES.__getitem__)
    assert inv.name == "train-123456"
    assert inv.transport == "srun"
    assert [n.name for n in inv.nodes] == ["gpu09", "gpu07", "gpu10"]
    assert inv.head_name == "gpu09" and inv.head.address == "10.30.0.9"  # not head: gpu07
    assert inv.min_nodes == 3
    assert inv.ports == job_ports("123456")
    assert inv.temp_dir == "/tmp/rtk-123456"
    assert inv.dashboard_host == "10.30.0.9"  # the head's address, not the file's 0.0.0.0
    assert "123456" in inv.source
    template, gpu07 = inventory.node("gpu01"), inventory.node("gpu07")
    for name in ("gpu09", "gpu10"):
        node = inv.node(name)
        assert node.address == ADDRESSES[name]
        assert (node.python, node.ray, node.env) == (template.python, template.ray, template.env)
        assert node.gpus == 8
    kept = inv.node("gpu07")
    assert (kept.address, kept.python, kept.cpus) == ("10.20.0.7", "/opt/gpu07/bin/python", 16)
    assert (kept.env, kept.resources) == (gpu07.env, gpu07.resources)
    assert kept.gpus == 8  # the allocation's count wins over the inventory's 2


def test_without_slurm_gpus_the_inventory_counts_stay(inventory: Inventory) -> None:
    job = Allocation("5", ("gpu07", "gpu09"), gpus_per_node=None)
    inv = slurm_inventory(inventory, job, resolve=ADDRESSES.__getitem__)
    assert [n.gpus for n in inv.nodes] == [2, inventory.node("gpu01").gpus]


@pytest.mark.parametrize("job_id", ["1", "4242", "99999999999"])
def test_temp_dir_is_per_job_and_short(inventory: Inventory, job_id: str) -> None:
    """Ray's unix sockets (temp dir + session and socket names) must fit in 107 bytes."""
    inv = slurm_inventory(inventory, Allocation(job_id, ("gpu01",), None), resolve=str)
    assert inv.temp_dir.endswith(job_id) and inv.temp_dir.startswith("/tmp/")
    assert len(inv.temp_dir) <= 48


def test_plan_blocks_every_start_and_uses_the_jobs_ports(inventory: Inventory) -> None:
    job = Allocation("4242", ("gpu09", "gpu07", "gpu10"), gpus_per_node=8)
    plan = build_plan(slurm_inventory(inventory, job, resolve=ADDRESSES.__getitem__))
    ports = job_ports("4242")
    assert plan.head_address == f"10.30.0.9:{ports.gcs}"
    assert plan.dashboard_url == f"http://10.30.0.9:{ports.dashboard}"
    for node in plan.nodes:
        assert node.start_command.endswith(" --block")
        named = re.findall(r"--[a-z-]*port=(\d+)", node.start_command)
        assert len(named) >= 8 and {int(p) for p in named} <= set(dict(ports).values())
        assert set(node.ports) <= set(dict(ports).values())
    assert f"--port={ports.gcs} " in plan.head.start_command
    assert all(f"--address={plan.head_address} " in w.start_command for w in plan.workers)
    assert not build_plan(inventory).head.start_command.endswith("--block")  # ssh: no


# --- the srun transport --------------------------------------------------------------


def test_srun_argv_runs_one_overlapping_step_on_the_node(
    inventory: Inventory, tmp_path: Path
) -> None:
    require(shutil.which("srun") is not None, "srun is needed (slurm-client)")
    command = "echo 'a b' && exit 3"
    argv = SrunTransport("4242", tmp_path / "logs").argv(inventory.node("gpu07"), command)
    assert argv[0] == shutil.which("srun")
    assert argv[-3:] == ["bash", "-c", command]  # one argument, unquoted: no shell between
    options = argv[1:-3]  # srun reads options only before the program
    for flag in ("--overlap", "--nodes=1", "--ntasks=1", "--nodelist=gpu07", "--jobid=4242"):
        assert flag in options
    assert not (tmp_path / "logs").exists()


def test_srun_knows_every_option_rtk_passes(
    inventory: Inventory, slurm_conf: Path, tmp_path: Path
) -> None:
    require(shutil.which("srun") is not None, "srun is needed (slurm-client)")
    done = subprocess.run(["srun", "--help"], capture_output=True, text=True, timeout=30)
    require(done.returncode == 0, f"srun --help cannot run here: {done.stderr}")
    argv = SrunTransport("4242", tmp_path).argv(inventory.node("gpu01"), "true")
    for option in argv[1:-3]:
        assert re.search(rf"\s{re.escape(option.split('=')[0])}[=\s]", done.stdout), option


def test_srun_transport_needs_srun_on_path(tmp_path: Path, no_scontrol: None) -> None:
    with pytest.raises(SlurmError, match="srun on PATH") as caught:
        SrunTransport("4242", tmp_path)
    assert caught.value.exit_code == 8


def test_make_transport_takes_the_job_from_the_environment(
    inventory: Inventory, monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    require(shutil.which("srun") is not None, "srun is needed (slurm-client)")
    for key, value in JOB_ENV.items():
        monkeypatch.setenv(key, value)
    inv = slurm_inventory(inventory, read_allocation(), resolve=ADDRESSES.__getitem__)
    transport = make_transport(inv)
    assert isinstance(transport, SrunTransport)
    assert transport.job_id == "4242"
    assert transport.log_dir == state_dir / "train-4242" / "srun"


# --- the CLI -------------------------------------------------------------------------


def test_cli_dry_run_plans_the_allocations_nodes(inventory: Inventory, state_dir: Path) -> None:
    done = rtk("up", "--slurm", "inv.yaml", "--dry-run", "--full", env=JOB_ENV)
    assert done.returncode == 0, done.stderr
    golden = GOLDEN / "slurm-job.up.txt"
    if os.environ.get("RTK_UPDATE_GOLDEN"):
        golden.write_text(done.stdout)
    assert done.stdout == golden.read_text(), f"plan text changed; diff against {golden}"
    nodes = re.findall(r"^\[(\S+)\] (head|worker) at (\S+), 8 GPU", done.stdout, re.M)
    assert nodes == [
        ("gpu01", "head", "10.20.0.1"),
        ("gpu02", "worker", "10.20.0.2"),
        ("gpu03", "worker", "10.20.0.3"),
        ("gpu07", "worker", "10.20.0.7"),
    ]
    assert "gpu04" not in done.stdout
    assert done.stdout.count(" --block\n") == 4
    assert not state_dir.exists()
    assert not Path("/tmp/rtk-4242").exists()


def test_cli_outside_an_allocation_exits_8_with_one_line(inventory: Inventory) -> None:
    done = rtk("up", "--slurm", "inv.yaml", "--dry-run", env=NO_SLURM)
    assert done.returncode == 8
    assert "not inside a SLURM allocation" in done.stderr and "SLURM_JOB_ID" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_cli_local_and_slurm_exclude_each_other() -> None:
    done = rtk("up", "--local", "--slurm", "--dry-run", env=JOB_ENV)
    assert done.returncode == 2
    assert "--local and --slurm exclude each other" in done.stderr
