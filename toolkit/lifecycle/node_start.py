"""One node's steps of a bring-up: probe and files, ``ray start``, and what they left.

``lifecycle.start`` orders these steps across the nodes (fan-out, the head first, workers
in waves); each function here runs on one node and records what happened on that
node's ``NodeOutcome``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from toolkit.cluster.plan import RAY_READY_TEXT, ClusterPlan, NodePlan, fill_env
from toolkit.cluster.plan_text import env_file
from toolkit.cluster.progress_reporter import Reporter
from toolkit.cluster.ray_status import ClusterStatus, cluster_status
from toolkit.cluster.up_steps import NodeStep
from toolkit.errors import ClusterError, RtkError, TransportError, WaitTimeoutError
from toolkit.gpu.limits import GpuLimits
from toolkit.gpu.limits_over_ssh import SshGpuLimits
from toolkit.lifecycle.down import stop_node
from toolkit.lifecycle.failures.causes import explain_start_failure, port_names, start_blocker
from toolkit.netenv import env_for_node
from toolkit.node.common import GPU_RESTORE_FILE
from toolkit.nodeinfo import call_agent
from toolkit.nodeinfo.probe import ContainerFacts, ProbeFacts
from toolkit.nodeinfo.start_facts import StartDiagFacts, read_start_diag
from toolkit.preflight.container_checks import container_checks, failure_text
from toolkit.state.tls import ClusterTls
from toolkit.transport.base import Transport

__all__ = ["RAY_READY_TEXT", "NodeOutcome", "StaleEntries", "prepare_node", "start_node"]

PROBE_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.25
TAIL_LINES = 40  # of a failed ray start's output, kept for --verbose


@dataclass
class NodeOutcome:
    """What ``up`` did on one node."""

    name: str
    role: str
    action: str = "pending"  # started | already running | failed
    node_ip: str | None = None
    network_profile: str | None = None
    duration_s: float = 0.0
    error: str | None = None
    rtk_digest: str | None = None  # of the rtk source the node's Python imports
    ray_version: str | None = None  # of the node's Python (None: in a container, or unknown)
    detail: str | None = None  # what a failure's cause was read from (--verbose)
    ran: list[NodeStep] = field(default_factory=list)  # the plan's steps taken, in order


def prepare_node(
    node_plan: NodePlan,
    plan: ClusterPlan,
    transport: Transport,
    token: str | None,
    reporter: Reporter,
    outcome: NodeOutcome,
    tls: ClusterTls | None = None,
    refuse_running: bool = False,
    head_ray_version: str | None = None,
) -> bool:
    """Probe, write token, TLS files and env file; True when ``ray start`` is still needed.

    With ``tls`` (``ray.tls``), the node's certificate names its inventory address and
    name, its host name and the address Ray binds there (the probe's), and 127.0.0.1.
    With ``refuse_running`` (credentials rotated), a node where this cluster's Ray
    already runs is an error rather than left as it is: it holds the old credentials.
    A node whose Ray would not start (its temp dir, its Python without Ray or with
    another version than ``head_ray_version``, the head's) is refused with the cause
    (``lifecycle.failures.causes.start_blocker``) before anything is written there.

    A node with a container is ready when its runtime answers, the image is there and,
    for GPUs, the runtime's GPU hook (``preflight.container_checks``); its Ray runs
    when rtk's container of it runs.

    Raises:
        ClusterError: The node cannot start Ray: no route to the head, a port in use,
            its Ray running with credentials that ``refuse_running`` says are old,
            its container's runtime, image or GPU hook missing, or (``NetEnvError``)
            its network does not fit the inventory's profile.
    """
    node = node_plan.node
    reporter.node(node.name, "probing")
    answer = call_agent(transport, node, node_plan.probe_command, PROBE_TIMEOUT_S)
    outcome.ran.append(NodeStep.PROBE)
    facts = ProbeFacts.from_json(node.name, answer)
    if facts.route.error:
        raise ClusterError(f"{node.name}: {facts.route.error}")
    outcome.node_ip = facts.route.source_ip
    # Ray in a container imports the image's rtk, if any, not the host's.
    outcome.rtk_digest = facts.rtk_digest if node_plan.container is None else None
    outcome.ray_version = facts.ray.version if facts.ray and node_plan.container is None else None
    reporter.phase(node.name, "probed")
    container = _container_facts(node_plan, facts)
    if container.running if container is not None else facts.raylet_running:
        what = "Ray" if node_plan.container is None else f"container {node_plan.container.name}"
        if refuse_running:
            raise ClusterError(
                f"{node.name}: this cluster's {what} still runs here with the old token and "
                "certificates; stop it (rtk down) and run rtk up again"
            )
        outcome.action = "already running"
        reporter.node(node.name, f"this cluster's {what} already runs here; leaving it")
        if facts.gpu_restore_file is not None:
            reporter.info(
                f"{node.name}: GPU settings a run set are in place ({GPU_RESTORE_FILE}); left"
                " while Ray runs here (`rtk profile --restore` puts them back)"
            )
        return False
    if facts.gpu_restore_file is not None:
        outcome.ran.append(NodeStep.PUT_BACK)
        put_back_gpu_settings(node_plan, plan, transport, reporter)
    if node_plan.container is not None and container is not None:
        spec = node_plan.container
        failed = failure_text(container_checks(node.name, spec.image, spec.gpus, container))
        if failed:
            raise ClusterError(f"{node.name}: {failed}")
    blocker = start_blocker(
        facts.temp_dir,
        facts.ray if node_plan.container is None else None,
        plan.head.name,
        head_ray_version,
    )
    if blocker:
        raise ClusterError(f"{node.name}: {blocker}")
    if facts.rtk_pids or (container is not None and container.state is not None):
        reporter.node(node.name, "stopping leftovers of an earlier run of this cluster")
        outcome.ran.append(NodeStep.STOP_LEFTOVERS)
        stop_node(node_plan, transport)
    busy = facts.busy_ports
    if busy:
        port_name, holders = port_names(plan.inventory.ports), facts.busy_port_holders
        held = ", ".join(
            f"{p} ({port_name.get(p, 'port')}) by {holders.get(p, 'another program')}" for p in busy
        )
        raise ClusterError(
            f"{node.name}: port(s) already in use: {held}; stop it or choose other ports "
            "in the inventory's ports: section"
        )
    network = env_for_node(plan.inventory, node, facts.network)
    outcome.network_profile = network.profile
    reporter.node(node.name, f"network profile {network.profile}: {network.profile_reason}")
    try:
        env = fill_env(node_plan, facts.detected(), network.variables)
    except KeyError as e:
        raise ClusterError(
            f"{node.name}: the probe could not find the {e.args[0]} on the "
            f"route to the head; set network.interface in the inventory"
        ) from e
    if token is not None:
        outcome.ran.append(NodeStep.TOKEN)
        transport.put(node, plan.paths.token_file, token.encode(), mode=0o600)
    if tls is not None:
        outcome.ran.append(NodeStep.TLS)
        names = [node.address, node.name, facts.hostname, facts.route.source_ip]
        identity = tls.node(node.name, names)
        transport.put(node, plan.paths.tls_ca_file, tls.ca().cert_pem, mode=0o600)
        transport.put(node, plan.paths.tls_key_file, identity.key_pem, mode=0o600)
        transport.put(node, plan.paths.tls_cert_file, identity.cert_pem, mode=0o600)
    text = env_file(plan, node_plan, env)
    outcome.ran.append(NodeStep.ENV)
    transport.put(node, plan.paths.env_file, text.encode(), mode=0o600)
    return True


def put_back_gpu_settings(
    node_plan: NodePlan, plan: ClusterPlan, transport: Transport, reporter: Reporter
) -> None:
    """Put back the GPU settings an earlier run left on the node (its restore file).

    As ``rtk profile --restore`` does (``SshGpuLimits.restore``), before Ray starts
    there: no run of this cluster holds them then. One line says what happened; a
    failure does not stop the bring-up (the file stays for ``rtk profile --restore``).
    """
    name = node_plan.name
    what = f"GPU power limits an earlier run left ({GPU_RESTORE_FILE})"
    limits: GpuLimits = SshGpuLimits(plan, transport, [node_plan])
    done = limits.restore()[name]
    if done.failed:
        why = done.failed.removeprefix(f"{name}: ")
        reporter.info(f"{name}: could not put back the {what}: {why}")
        return
    reporter.info(f"{name}: put back {what}")


def _container_facts(node_plan: NodePlan, facts: ProbeFacts) -> ContainerFacts | None:
    """The probe's container facts for a node with a container (None for one without).

    Raises:
        ClusterError: The node has a container and the probe said nothing of it.
    """
    if node_plan.container is None:
        return None
    if facts.container is None:
        raise ClusterError(
            f"{node_plan.name}: the node agent's probe reported nothing of the container "
            f"runtime ({node_plan.container.runtime}); is the agent rtk's own?"
        )
    return facts.container


def start_node(
    node_plan: NodePlan,
    plan: ClusterPlan,
    transport: Transport,
    reporter: Reporter,
    outcome: NodeOutcome,
    head_ray_version: str | None = None,
) -> None:
    """``ray start`` on the node; its outcome says started or failed, and why.

    On a failure the node is asked why (``startdiag.py``), the cause is one line
    (``lifecycle.failures.causes``) with Ray's own text as the outcome's ``detail``, and
    whatever the start left running there is stopped.
    """
    node = node_plan.node
    reporter.node(node.name, f"starting Ray ({node_plan.role})")
    outcome.ran.append(NodeStep.START)
    began = time.monotonic()
    timeout_s = plan.inventory.ray.start_timeout_s
    what = "ray start" if node_plan.container is None else "container start"
    try:
        result = transport.start_daemon(
            node,
            node_plan.start_command,
            RAY_READY_TEXT,
            timeout_s,
            step_options=node_plan.start_step_options,
        )
    except TransportError as e:
        # Past its time (or the node was lost): what the node says may tell why.
        outcome.duration_s = time.monotonic() - began
        _failed(node_plan, plan, transport, reporter, outcome, what, None, str(e), head_ray_version)
        return
    outcome.duration_s = time.monotonic() - began
    if result.ok:
        outcome.action = "started"
        reporter.node(node.name, f"Ray started in {outcome.duration_s:.1f} s")
        reporter.phase(node.name, "started")
        return
    output = result.tail(TAIL_LINES)
    _failed(
        node_plan,
        plan,
        transport,
        reporter,
        outcome,
        what,
        result.exit_code,
        output,
        head_ray_version,
    )


def _failed(
    node_plan: NodePlan,
    plan: ClusterPlan,
    transport: Transport,
    reporter: Reporter,
    outcome: NodeOutcome,
    what: str,
    exit_code: int | None,
    output: str,
    head_ray_version: str | None,
) -> None:
    """Record why the node's start failed (asking the node), then stop what it left."""
    outcome.action = "failed"
    how = f"exit {exit_code}" if exit_code is not None else "did not finish"
    reporter.node(node_plan.name, f"{what} failed ({how}); reading why")
    facts = read_facts_after(node_plan, plan, transport)
    failure = explain_start_failure(
        what,
        exit_code,
        output,
        facts,
        port_names(plan.inventory.ports),
        plan.head.name,
        head_ray_version,
        host_ray=node_plan.container is None,
    )
    outcome.error, outcome.detail = failure.cause, failure.detail
    if failure.detail:
        reporter.detail(node_plan.name, failure.detail)
    reporter.phase(node_plan.name, "failed", failure.cause)
    _stop_what_was_left(node_plan, transport, reporter)


def read_facts_after(
    node_plan: NodePlan, plan: ClusterPlan, transport: Transport
) -> StartDiagFacts | None:
    """What the node says after its Ray failed to start or join (None: it could not say).

    Read before anything is stopped there: stopping removes Ray's temp dir and logs.
    """
    inv = plan.inventory
    head_ports: tuple[int, ...] = ()
    if node_plan.role != "head":
        head_ports = (inv.ports.gcs, inv.ports.node_manager, inv.ports.object_manager)
    try:
        return read_start_diag(
            transport,
            node_plan.node,
            plan.paths.temp_dir,
            node_plan.ports,
            inv.head.address if head_ports else None,
            head_ports,
        )
    except RtkError:
        return None


def _stop_what_was_left(node_plan: NodePlan, transport: Transport, reporter: Reporter) -> None:
    """Stop what a failed ``ray start`` left running on its node (a raylet, agents)."""
    try:
        stopped = stop_node(node_plan, transport)
    except RtkError as e:
        reporter.node(node_plan.name, f"could not stop what the failed start left: {e}")
        return
    if stopped.stopped:
        reporter.node(node_plan.name, f"stopped {stopped.stopped} process(es) it left")


def settled_call(
    prepare: Callable[[NodePlan], bool],
    node_plan: NodePlan,
    outcome: NodeOutcome,
    reporter: Reporter,
) -> bool:
    """``prepare(node_plan)``; a failure is recorded on its outcome (False)."""
    try:
        return prepare(node_plan)
    except Exception as e:  # noqa: BLE001 - recorded per node, reported with the rest
        record_failures({outcome.name: e}, {outcome.name: outcome}, reporter)
        return False


def record_failures(
    failed: Mapping[str, BaseException], outcomes: dict[str, NodeOutcome], reporter: Reporter
) -> None:
    """Mark each node of ``failed`` failed with its error, and report it."""
    for name, error in failed.items():
        outcome = outcomes[name]
        outcome.action = "failed"
        outcome.error = str(error)
        reporter.node(name, f"failed: {error}")
        reporter.phase(name, "failed", str(error))


class StaleEntries:
    """Waits until Ray no longer lists restarted nodes' dead raylets as alive.

    A raylet killed hard stays ALIVE in the GCS until its health check gives up (about
    15 s). A new raylet on the same pinned ports would answer for the old entry too, and
    Ray could then place two STRICT_SPREAD bundles on one host, so a restart waits.
    Every node waiting shares one question to Ray per poll: a thousand restarts are
    not a thousand status calls on the head.
    """

    def __init__(self, plan: ClusterPlan, transport: Transport, reporter: Reporter) -> None:
        """Ask Ray through ``transport`` on ``plan``'s head."""
        self._plan, self._transport, self._reporter = plan, transport, reporter
        self._lock = threading.Lock()
        self._status: ClusterStatus | None = None
        self._asked_at = 0.0

    def _fresh(self) -> ClusterStatus:
        """Ray's node list, asked at most once per poll interval for all waiting nodes."""
        with self._lock:
            if self._status is None or time.monotonic() - self._asked_at >= POLL_INTERVAL_S:
                self._status = cluster_status(self._plan, self._transport)
                self._asked_at = time.monotonic()
            return self._status

    def wait(self, name: str) -> None:
        """Return once Ray lists no live raylet for node ``name``.

        Raises:
            WaitTimeoutError: The entry was still alive after ``ray.wait_timeout_s``.
        """
        timeout_s = self._plan.inventory.ray.wait_timeout_s
        deadline = time.monotonic() + timeout_s
        said = False
        while True:
            status = self._fresh()
            node = next(n for n in status.nodes if n.name == name)
            if status.error or not node.ray_node_ids:
                return
            if not said:
                self._reporter.node(
                    name, "waiting for Ray to drop this node's dead raylet (up to ~15 s)"
                )
                said = True
            if time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{name}: Ray still lists its old raylet ({', '.join(node.ray_node_ids)}) "
                    f"as alive after {timeout_s:g} s, though none runs there"
                )
            time.sleep(POLL_INTERVAL_S * 2)
