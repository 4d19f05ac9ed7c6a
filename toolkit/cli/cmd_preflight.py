"""``rtk preflight``: prove the nodes are fit before a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from toolkit.cli.common import choose_inventory, inventory_options, print_json
from toolkit.flows import Session
from toolkit.preflight.bandwidth.measure import parse_sizes
from toolkit.preflight.checks import Thresholds
from toolkit.preflight.load.node import PRECISIONS
from toolkit.preflight.peers import (
    ALL_PAIRS_MAX_NODES,
    DEFAULT_SEED,
    RANDOM_PEERS,
    PeerMode,
    parse_mode,
)
from toolkit.preflight.runner import BandwidthOptions, LoadOptions, run_preflight
from toolkit.state.store import StateStore

RUN_DIR_HELP = "Deprecated: the old name of --output-dir."

PREFLIGHT_HELP = """Check every node of INVENTORY before a run; one exit status (1: a check failed).

\b
Per node: the transport reaches it; /dev/shm size; open-files and locked-memory
limits; the host name does not resolve to a loopback address; free disk in the run
directory; pinned Ray ports outside the kernel's ephemeral range; the same Python,
ray, torch and NCCL as the other nodes; its clock against the head's.
Between nodes where Ray is up: each node connects to its peers' Ray ports, on the
node, many at once. Up to 64 nodes every node checks every other one; above, its next
node and 8 random others (seeded), each node checked by at least 3 (--port-peers).
A port none of a node's testers reach fails on that node ("object_manager port 6381
refused from 9 of 9 peers"), a pair failing among passes fails on the pair (at most
20, then a count); --json keeps every failure per node and port under "reach".
Per GPU node (NVML): GPU count and UUIDs against the inventory, ECC and row-remap
errors, persistence mode, clocks-event reasons at idle, PCIe link, NVLink, driver;
XIDs in the kernel log (journalctl -k or dmesg); with --dcgm-level, DCGM's
diagnostic (dcgmi diag). Per node with RDMA devices: each InfiniBand/RoCE port's
state, rate and error counters, against network.profile and NCCL_IB_HCA.
Prints how many checks of each family passed, warned and failed, then only what
failed or warned: a problem alike on many nodes, or on many pairs into or out of one
node, is one line naming the nodes as ranges (at most about 40 lines at any size).
Each gives the measured value, what is wanted and a hint; then the next step.
--verbose prints every check; --json and --output every check too.

\b
With --bandwidth (Ray must be up; about 1 s per node plus the sweep):
  TCP throughput per pair of a ring (node1->node2, ..., nodeN->node1), which covers
  every node in N tests; a pair fails below --min-tcp-gbit-s or below half the
  median pair, after up to --bandwidth-retries more tries.
  An all-reduce sweep (1 MiB to 1 GiB) over every GPU with NCCL, or (1 to 64 MiB)
  over every node with gloo where there are no GPUs: algbw and busbw = algbw x
  2(n-1)/n, as nccl-tests reports them, and the size where busbw plateaus; fails
  below --min-busbw-gb-s. --allreduce-sizes 1M,16M,256M,1G picks the sizes.
  A pair still slow after its retries, or a failed or slow all-reduce, is
  localised: tests on disjoint groups at once until the node or link is named
  (net.localise.tcp, net.localise.allreduce).

\b
With --load (Ray must be up; about --load-seconds plus half a minute):
  On every node at once, a GEMM on each GPU in --precision for --load-seconds
  (fp32 on CPU-only nodes), with SM clock, power and throttle reasons read during
  it; host->device and device->host copies; a device-memory copy. Then each node's
  own all-reduce (1 to 256 MiB over its GPUs with NCCL; 1 to 16 MiB over two CPU
  ranks with gloo). A device or node below 80% of the median of its peers of the
  same hardware warns, below 60% fails; known GPU models are also held to the
  hardware table's limits; a hardware throttle reason under load fails.

\b
Examples:
  rtk preflight inv.yaml
  rtk preflight inv.yaml --verbose
  rtk preflight inv.yaml --port-peers all
  rtk preflight inv.yaml --bandwidth --min-tcp-gbit-s 20
  rtk preflight inv.yaml --load --precision fp16 --load-seconds 5
  rtk preflight inv.yaml --json --output runs/preflight.json
"""


def _port_peers(value: str) -> PeerMode | None:
    try:
        return parse_mode(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _sizes(value: str | None) -> tuple[int, ...] | None:
    try:
        return None if value is None else parse_sizes(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


@click.command("preflight", help=PREFLIGHT_HELP)
@inventory_options
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--verbose", "-v", is_flag=True, help="Print a line for every check, passed ones too."
)
@click.option(
    "--output-dir",
    default="~",
    show_default=True,
    help="Where runs will write, as a path on the nodes (for the free-disk check).",
)
@click.option("--run-dir", "legacy_run_dir", default=None, hidden=True, help=RUN_DIR_HELP)
@click.option(
    "--output", type=click.Path(dir_okay=False), help="Also write the results (JSON) here."
)
@click.option(
    "--port-peers",
    default="auto",
    show_default=True,
    callback=lambda _ctx, _param, value: _port_peers(value),
    help="Whose Ray ports each node checks: all (every pair), ring (its next node), "
    f"N (its next node and N random others), auto (all up to {ALL_PAIRS_MAX_NODES} "
    f"nodes up, else the ring and {RANDOM_PEERS}).",
)
@click.option(
    "--port-peers-seed",
    type=int,
    default=DEFAULT_SEED,
    show_default=True,
    help="Seed of the random peers (the same seed draws the same peers).",
)
@click.option("--bandwidth", is_flag=True, help="Also measure TCP per pair and an all-reduce.")
@click.option(
    "--min-tcp-gbit-s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="A pair below this many Gbit/s fails (0: only the relative check).",
)
@click.option(
    "--min-busbw-gb-s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="All-reduce bus bandwidth below this many GB/s fails (0: report only).",
)
@click.option(
    "--bandwidth-retries",
    type=click.IntRange(min=0, max=10),
    default=2,
    show_default=True,
    help="Measure a failing pair again this many times before it fails.",
)
@click.option(
    "--dcgm-level",
    type=click.IntRange(0, 2),
    default=0,
    show_default=True,
    help="Run dcgmi diag -r LEVEL on GPU nodes that have DCGM: 1 is the quick "
    "diagnostic (about 1 min), 2 the medium one (a few min); 0: none.",
)
@click.option("--load", is_flag=True, help="Also load-test every node and run its own all-reduce.")
@click.option(
    "--load-seconds",
    type=click.FloatRange(min=0.1, max=600),
    default=2.0,
    show_default=True,
    help="How long each node's GEMM runs.",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="bf16",
    show_default=True,
    help="The GEMM's precision on GPUs (CPU-only nodes use fp32).",
)
@click.option(
    "--allreduce-sizes",
    callback=lambda _ctx, _param, value: _sizes(value),
    help="All-reduce sizes, e.g. 1M,16M,256M,1G (default: 1M-1G on GPUs, 1M-64M on CPUs).",
)
def preflight_cmd(
    inventory: str | None,
    local: bool,
    slurm: bool,
    as_json: bool,
    verbose: bool,
    output_dir: str,
    legacy_run_dir: str | None,
    output: str | None,
    port_peers: PeerMode | None,
    port_peers_seed: int,
    bandwidth: bool,
    min_tcp_gbit_s: float,
    min_busbw_gb_s: float,
    bandwidth_retries: int,
    dcgm_level: int,
    load: bool,
    load_seconds: float,
    precision: str,
    allreduce_sizes: tuple[int, ...] | None,
) -> None:
    """Check the nodes (help: PREFLIGHT_HELP)."""
    inv = choose_inventory(inventory, local, slurm)
    run_dir = legacy_run_dir if legacy_run_dir is not None else output_dir
    thresholds = Thresholds(tcp_min_gbit_s=min_tcp_gbit_s, busbw_min_gb_s=min_busbw_gb_s)
    measure = (
        BandwidthOptions(
            StateStore(inv.name),
            lambda line: click.echo(line, err=True),
            retries=bandwidth_retries,
            sizes_bytes=allreduce_sizes,
        )
        if bandwidth
        else None
    )
    load_test = (
        LoadOptions(
            StateStore(inv.name),
            lambda line: click.echo(line, err=True),
            precision=precision,
            duration_s=load_seconds,
        )
        if load
        else None
    )
    with Session(inv) as session:
        report = run_preflight(
            session.plan,
            session.transport,
            run_dir,
            thresholds,
            measure,
            dcgm_level=dcgm_level,
            load=load_test,
            port_peers=port_peers,
            port_seed=port_peers_seed,
        )
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if as_json:
        print_json(report.to_json())
    else:
        click.echo(report.render(verbose=verbose), nl=False)
    sys.exit(report.exit_code)
