"""Run preflight: gather every node's facts in parallel, then grade them.

Each node runs ``toolkit/node/facts.py`` once (over its transport, like the agent): host
facts, package versions, its clock, and TCP connections to the Ray ports of its peers
that are up (``peers``: every other node up to 64 nodes, a ring and random peers above),
sent inside the script's text (``toolkit.nodeinfo.reach_request``). Each answer's port
checks are tallied as it arrives (``port_reach``), so what is kept grows with the
failures, not with the pairs. The grading is pure (``toolkit.preflight.checks``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from toolkit.cluster.plan import ClusterPlan, NodePlan
from toolkit.cluster.ray_status import cluster_status
from toolkit.errors import ClusterError, RunDirError
from toolkit.nodeinfo import FACTS
from toolkit.nodeinfo.host_facts import NodeFacts
from toolkit.nodeinfo.reach_request import PeerPorts, ReachRequest, script_with
from toolkit.preflight import checks, gpu_checks
from toolkit.preflight.bandwidth.job_options import BandwidthJobOptions
from toolkit.preflight.bandwidth.job_result import BandwidthResult
from toolkit.preflight.bandwidth.measure import PROGRESS_PREFIX, RESULT_PREFIX
from toolkit.preflight.hardware import load_hardware
from toolkit.preflight.history.grade import dcgm_timeout_s, expectation_for, history_checks
from toolkit.preflight.load import job_result
from toolkit.preflight.load.intra_checks import load_result_checks, model_limits
from toolkit.preflight.load.job_options import LoadJobOptions
from toolkit.preflight.measurement_jobs import PreflightJob, run_preflight_job
from toolkit.preflight.peers import DEFAULT_SEED, PeerMode, PeerPlan, choose_mode, select_peers
from toolkit.preflight.port_reach import ReachTally
from toolkit.preflight.result import Check, PreflightReport
from toolkit.preflight.security import NodeSecurity, node_security, security_checks
from toolkit.rundir import RunDir
from toolkit.shell import join
from toolkit.state.store import StateStore
from toolkit.state.tls import utc_now
from toolkit.transport.base import Transport
from toolkit.transport.group import run_each

FACTS_TIMEOUT_S = 30.0
HEAD_PORTS = ("gcs", "dashboard", "client_server")
NODE_PORTS = ("node_manager", "object_manager")
# facts.py's connection timeout and how many it tries at once (a test holds them equal):
# its port checks take at most a timeout per wave, on top of FACTS_TIMEOUT_S.
CONNECT_TIMEOUT_S = 2.0
REACH_CONCURRENCY = 64


@dataclass
class _Answer:
    facts: NodeFacts
    sent_s: float
    received_s: float

    @property
    def offset_s(self) -> tuple[float, float]:
        """The node's clock minus ours at the midpoint of the round trip, and its error."""
        midpoint_s = (self.sent_s + self.received_s) / 2
        return self.facts.wall_s - midpoint_s, (self.received_s - self.sent_s) / 2


def peer_plan(
    plan: ClusterPlan, up: set[str], mode: PeerMode | None = None, seed: int = DEFAULT_SEED
) -> PeerPlan:
    """Whose Ray ports each node checks: among the nodes up, by ``mode`` (None: by size)."""
    targets = [n.node.name for n in plan.nodes if n.node.name in up]
    sources = [n.node.name for n in plan.nodes]
    return select_peers(sources, targets, choose_mode(mode, len(targets)), seed)


def port_numbers(plan: ClusterPlan) -> dict[str, int]:
    """The number of each Ray port a node checks on its peers, by the port's name."""
    ports = plan.inventory.ports
    return {name: int(getattr(ports, name)) for name in NODE_PORTS + HEAD_PORTS}


def reach_request(
    by_name: Mapping[str, NodePlan], numbers: Mapping[str, int], peers: tuple[str, ...]
) -> ReachRequest:
    """The Ray ports of ``peers`` one node connects to (the head's own three too)."""
    found = []
    for name in peers:
        node_plan = by_name[name]
        names = NODE_PORTS + (HEAD_PORTS if node_plan.role == "head" else ())
        found.append(PeerPorts(name, node_plan.node.address, names))
    return ReachRequest(dict(numbers), tuple(found))


def facts_limit_s(dcgm_level: int, connections: int) -> float:
    """How long one node's facts may take: its DCGM diagnostic and its port checks too."""
    waves = math.ceil(connections / REACH_CONCURRENCY)
    return FACTS_TIMEOUT_S + dcgm_timeout_s(dcgm_level) + waves * CONNECT_TIMEOUT_S


@dataclass(frozen=True)
class BandwidthOptions:
    """How ``--bandwidth`` measures: seconds per TCP pair, retries, all-reduce sizes.

    ``sizes_bytes`` None: by backend, 1 MiB to 1 GiB on GPUs (NCCL), 1 to 64 MiB on
    CPUs (gloo). ``busbw_expected_min_gb_s``: the least busbw the hardware should
    reach, where it is known; below it the all-reduce fails and is localised.
    """

    store: StateStore
    echo: Callable[[str], None]
    duration_s: float = 1.0
    retries: int = 2
    sizes_bytes: tuple[int, ...] | None = None
    busbw_expected_min_gb_s: float | None = None


@dataclass(frozen=True)
class LoadOptions:
    """How ``--load`` tests each node: the GEMM's precision (CPUs: fp32) and seconds."""

    store: StateStore
    echo: Callable[[str], None]
    precision: str = "bf16"
    duration_s: float = 2.0


def run_bandwidth(
    plan: ClusterPlan, options: BandwidthOptions, thresholds: checks.Thresholds
) -> BandwidthResult:
    """Run the bandwidth job on the cluster; its measurements (``bandwidth.job.main``).

    Raises:
        ClusterError: The job failed or printed no result.
        RunDirError: Its result has a field missing or of the wrong type (named).
    """
    job_options = BandwidthJobOptions(
        nodes=tuple(n.node.name for n in plan.nodes),
        duration_s=options.duration_s,
        retries=options.retries,
        thresholds=thresholds,
        sizes_bytes=options.sizes_bytes,
        busbw_expected_min_gb_s=options.busbw_expected_min_gb_s,
    )
    job = PreflightJob(
        "bandwidth",
        "toolkit.preflight.bandwidth.job",
        job_options.to_json(),
        PROGRESS_PREFIX,
        RESULT_PREFIX,
    )
    return BandwidthResult.from_json(run_preflight_job(plan, options.store, job, options.echo))


def run_preflight(
    plan: ClusterPlan,
    transport: Transport,
    run_dir: str = "~",
    thresholds: checks.Thresholds = checks.Thresholds(),  # noqa: B008 - frozen
    bandwidth: BandwidthOptions | None = None,
    alive: set[str] | None = None,
    dcgm_level: int = 0,
    load: LoadOptions | None = None,
    port_peers: PeerMode | None = None,
    port_seed: int = DEFAULT_SEED,
) -> PreflightReport:
    """Check every node of ``plan``; never raises for an unfit node (that is a result).

    With ``bandwidth``, also measure TCP per pair of a ring and an all-reduce sweep
    (a Ray job: Ray must be up). ``alive`` names the nodes alive in Ray when the caller
    has just asked Ray (``rtk up``); otherwise preflight asks. ``dcgm_level`` > 0 runs
    ``dcgmi diag -r LEVEL`` on every node that has it. With ``load``, also load-test
    every node and run its own all-reduce (a Ray job too). ``port_peers`` picks whose
    Ray ports each node checks (None: every pair up to 64 nodes up, a ring and random
    peers drawn with ``port_seed`` above; see ``peers``).
    """
    began = time.monotonic()
    report = PreflightReport(plan.inventory.name, head=plan.head.name, excluded=[*plan.excluded])
    if alive is None:
        alive = {n.name for n in cluster_status(plan, transport).nodes if n.alive}
    up = alive
    peers = peer_plan(plan, up, port_peers, port_seed)
    names = [n.node.name for n in plan.nodes]
    numbers = port_numbers(plan)
    by_name = {n.node.name: n for n in plan.nodes}
    tally = ReachTally(names, numbers, peers)

    def gather(node_plan: NodePlan) -> _Answer:
        node = node_plan.node
        request = reach_request(by_name, numbers, peers.peers.get(node.name, ()))
        command = FACTS.command(node, run_dir, str(dcgm_level), plan.paths.env_file)
        source = script_with(FACTS.source(), request)
        sent = time.time()
        limit_s = facts_limit_s(dcgm_level, len(request.targets()))
        result = transport.run(node, command, stdin=source, timeout_s=limit_s)
        received = time.time()
        facts = NodeFacts.from_json(node.name, FACTS.answer(node, result))
        # Tallied now and dropped: what is kept grows with the failures, not the pairs.
        tally.add(node.name, facts.reach)
        return _Answer(replace(facts, reach={}), sent, received)

    answers = run_each(plan.nodes, gather, parallel=plan.inventory.fanout.parallel)
    multi_node = len(plan.nodes) > 1
    pinned = {
        name: getattr(plan.inventory.ports, name)
        for name in type(plan.inventory.ports).model_fields
        if name not in ("min_worker", "max_worker")
    }
    for node_plan in plan.nodes:
        name = node_plan.node.name
        if name in answers.failed:
            report.checks.append(
                Check(
                    "connect.node",
                    name,
                    "fail",
                    str(answers.failed[name]).splitlines()[0][:160],
                    "reachable over the inventory's transport",
                    "check the node is up, its sshd, and the inventory's ssh settings",
                )
            )
            continue
        facts = answers.results[name].facts
        report.checks.append(Check("connect.node", name, "pass", facts.host.hostname))
        report.checks += checks.host_checks(name, facts.host, multi_node, thresholds)
        report.checks.append(checks.port_range_check(name, facts.host, pinned))
        report.checks += gpu_checks.gpu_checks(name, facts.gpus, node_plan.node.gpus)
        expect = expectation_for(plan.inventory, node_plan.node, dcgm_level)
        report.checks += history_checks(name, facts, expect)
    report.checks += tally.checks()
    security: dict[str, NodeSecurity | str] = {
        name: node_security(answer.facts.ray_files) for name, answer in answers.results.items()
    }
    report.checks += security_checks(plan, security, utc_now())
    if peers.pairs:
        report.reach = tally.record()
    report.checks += checks.version_checks(
        {n: a.facts.software for n, a in answers.results.items()}
    )
    report.checks += gpu_checks.driver_checks({n: a.facts.gpus for n, a in answers.results.items()})
    # Clock offsets from one round trip each: coarse (the transport's latency is the
    # error bar), enough to catch a node whose clock is seconds off.
    offsets = {n: a.offset_s for n, a in answers.results.items()}
    report.checks += checks.clock_checks(offsets, plan.head.node.name, thresholds)
    if len(up) < len(plan.nodes):
        report.checks.append(
            Check(
                "net.ports",
                "cluster",
                "warn",
                f"Ray up on {len(up)}/{len(plan.nodes)} node(s)",
                "Ray up on every node",
                "port reachability is checked between nodes where Ray runs: rtk up first",
            )
        )
    if bandwidth is not None:
        report.checks += _bandwidth_checks(plan, up, bandwidth, thresholds)
    if load is not None:
        report.checks += _load_checks(plan, up, load)
    report.duration_s = time.monotonic() - began
    return report


def _bandwidth_checks(
    plan: ClusterPlan, up: set[str], options: BandwidthOptions, thresholds: checks.Thresholds
) -> list[Check]:
    if plan.head.node.name not in up:
        return [
            Check(
                "net.bandwidth",
                "cluster",
                "fail",
                "Ray is not up on the head",
                "Ray up",
                "bandwidth is measured by a Ray job: rtk up first",
            )
        ]
    try:
        result = run_bandwidth(plan, options, thresholds)
    except (ClusterError, RunDirError) as e:
        first = str(e).splitlines()[0][:200]
        return [Check("net.bandwidth", "cluster", "fail", first, "the job runs", "see above")]
    return checks.bandwidth_checks(result, thresholds)


def _load_checks(plan: ClusterPlan, up: set[str], options: LoadOptions) -> list[Check]:
    if plan.head.node.name not in up:
        return [
            Check(
                "load.run",
                "cluster",
                "fail",
                "Ray is not up on the head",
                "Ray up",
                "the load test is a Ray job: rtk up first",
            )
        ]
    job_options = LoadJobOptions(
        tuple(n.node.name for n in plan.nodes), options.precision, options.duration_s
    )
    job = PreflightJob(
        "load",
        "toolkit.preflight.load.job",
        job_options.to_json(),
        job_result.PROGRESS_PREFIX,
        job_result.RESULT_PREFIX,
    )
    try:
        answer = run_preflight_job(plan, options.store, job, options.echo)
        result = job_result.LoadResult.from_json(answer)
    except (ClusterError, RunDirError) as e:
        first = str(e).splitlines()[0][:200]
        return [Check("load.run", "cluster", "fail", first, "the job runs", "see above")]
    return load_result_checks(result, model_limits(result, load_hardware()))


_SAVE = (
    "import os, pathlib, sys; d = pathlib.Path(os.path.expanduser(sys.argv[1])); "
    "d.mkdir(parents=True, exist_ok=True); (d / sys.argv[2]).write_text(sys.stdin.read())"
)


def save_in_run_dir(
    plan: ClusterPlan, transport: Transport, run_dir: str, report: PreflightReport
) -> None:
    """Write ``preflight.json`` into ``run_dir`` on the head, where the run writes too.

    Raises:
        ClusterError: It could not be written.
    """
    text = json.dumps(report.to_json(), indent=2) + "\n"
    command = join([plan.head.node.python, "-c", _SAVE, run_dir, RunDir(run_dir).preflight.name])
    result = transport.run(plan.head.node, command, stdin=text, timeout_s=FACTS_TIMEOUT_S)
    if not result.ok:
        raise ClusterError(f"cannot write {run_dir}/preflight.json on the head: {result.tail()}")
