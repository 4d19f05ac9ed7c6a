"""The plan as text: what ``--dry-run`` prints, and each node's env file."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from toolkit.cluster.containers.docker import CLUSTER_LABEL, NODE_LABEL, name_tokens
from toolkit.cluster.plan import NETWORK_AFTER, STOP_GRACE_S, ClusterPlan, Detect, NodePlan
from toolkit.cluster.plan_summary import (
    ADDRESS,
    NAME,
    SSH_PORT,
    PlanBlock,
    RenderedNode,
    Token,
    cut_hostlist,
    group_nodes,
)
from toolkit.cluster.up_steps import NodeStep, UpStep, node_steps, up_steps
from toolkit.netenv import describe_profile
from toolkit.node.common import GPU_RESTORE_FILE
from toolkit.resources import render
from toolkit.rundir.preflight import Exclusion
from toolkit.shell import join

WORKERS_AFTER_HEAD = "workers start in parallel once the head is up"
AGENT_NOTE = "(rtk node agent on stdin)"
# Reasons to exclude nodes are shown one line each, up to this many.
MAX_EXCLUDED_LINES = 8


# The bring-up's steps as ``rtk up`` takes them by default: the checks beside the wait.
DEFAULT_UP = up_steps(rotate=False, preflight=True)


def env_file(plan: ClusterPlan, node_plan: NodePlan, env: Mapping[str, str]) -> str:
    """The text of a node's env file (``templates/node.env.j2``)."""
    node = node_plan.node
    # In a container the env file is read inside: Ray's own directory goes first there.
    where = node.ray[0] if node_plan.container is not None else node.python
    return render(
        "node.env.j2",
        cluster=plan.inventory.name,
        node=node_plan.name,
        path=plan.paths.env_file,
        env=env,
        path_first=python_bin_dir(where),
    )


def python_bin_dir(python: str) -> str:
    """The directory of the node's Python (or Ray) when named by path, else ''.

    That directory (a venv's ``bin``) goes first on PATH in the node's env file.
    """
    return posixpath.dirname(python) if posixpath.isabs(python) else ""


def render_up(plan: ClusterPlan, steps: Sequence[UpStep] = DEFAULT_UP) -> str:
    """The bring-up plan, node by node, in the order rtk runs it (``--dry-run --full``).

    ``steps``: the bring-up's own (``up_steps``), numbered in the header.
    """
    lines = _up_header(plan, steps)
    lines += [f"  excluded   {e.describe()}" for e in plan.excluded]
    for index, node_plan in enumerate(plan.nodes):
        if index == 1:
            lines += ["", WORKERS_AFTER_HEAD]
        lines += ["", *_render_node(plan, node_plan)]
    return "\n".join(lines) + "\n"


def render_up_summary(plan: ClusterPlan, steps: Sequence[UpStep] = DEFAULT_UP) -> str:
    """The bring-up plan in one block per command shape (``--dry-run``): a screen at any N.

    Nodes whose commands differ only in their own name, address and SSH port share a
    block (``plan_summary.group_nodes``), headed by their host list; the head is a
    block of its own. Then the excluded nodes, grouped by reason, and a total.
    """
    blocks = group_nodes([_rendered_up(plan, n) for n in plan.nodes])
    lines = _up_header(plan, steps)
    for index, block in enumerate(blocks, start=1):
        if block.role != "head" and all(b.role == "head" for b in blocks[: index - 1]):
            lines += ["", WORKERS_AFTER_HEAD]
        lines += ["", _block_heading(index, block), *block.lines]
    lines += ["", *_excluded_lines(plan.excluded)]
    workers = len(plan.workers)
    lines.append(
        f"total: {len(plan.nodes):,} node(s) ({'1 head' if plan.nodes else 'no head'}, "
        f"{workers:,} worker(s)) in {len(blocks)} block(s)"
        + (f", {len(plan.excluded):,} excluded" if plan.excluded else "")
        + "; --full shows every node"
    )
    return "\n".join(lines) + "\n"


def _up_header(plan: ClusterPlan, steps: Sequence[UpStep]) -> list[str]:
    inv = plan.inventory
    p = inv.ports
    return [
        f"plan: rtk up, cluster {inv.name!r} from {inv.source}",
        f"  transport  {inv.transport}, {len(plan.nodes)} node(s), head {inv.head_name}",
        f"  temp dir   {plan.paths.temp_dir} (Ray's --temp-dir; rtk's files in "
        f"{plan.paths.rtk_dir}, mode 0700)",
        "  auth       "
        + (
            f"Ray token, file {plan.paths.token_file} (0600; never on a command line)"
            if plan.auth
            else "NONE: anyone who reaches the ports can run code on the cluster"
        ),
        "  tls        "
        + (
            "Ray's gRPC in TLS: a CA per cluster, a certificate per node (made here, "
            "kept in rtk's state directory)"
            if plan.tls
            else "off: Ray's gRPC traffic, the token included, crosses the network in "
            "clear (ray.tls: true)"
        ),
        f"  ports      gcs {p.gcs}, dashboard {p.dashboard}, client {p.client_server}, "
        f"node manager {p.node_manager}, object manager {p.object_manager},",
        f"             runtime env agent {p.runtime_env_agent}, dashboard agent "
        f"{p.dashboard_agent_grpc}/{p.dashboard_agent_listen}, metrics {p.metrics_export}, "
        f"workers {p.min_worker}-{p.max_worker}",
        f"  dashboard  {plan.dashboard_url}",
        *(
            f"  {'steps' if n == 1 else '':<10} {n}. {step.value}: {_describe_up(plan, step)}"
            for n, step in enumerate(steps, 1)
        ),
    ]


def _describe_up(plan: ClusterPlan, step: UpStep) -> str:
    inv = plan.inventory
    if step is UpStep.ROTATE:
        return "a new token, CA and certificates, made here (refused while the cluster runs)"
    if step is UpStep.NODES:
        ray = inv.ray
        return (
            "each node's steps (below), the head first, then the workers "
            f"{ray.start_wave} at a time every {ray.start_wave_interval_s:g} s"
        )
    if step is UpStep.WAIT:
        return (
            f"until {inv.min_nodes} of {len(plan.nodes)} node(s) are alive with their GPUs and "
            f"resources, at most {inv.ray.wait_timeout_s:g} s"
        )
    if step is UpStep.PREFLIGHT:
        return "the fast checks on the nodes started, beside the wait (--no-preflight skips them)"
    return "what this machine keeps of the cluster (its state.json), read until rtk down"


def _rendered_up(plan: ClusterPlan, node_plan: NodePlan) -> RenderedNode:
    """A node's bring-up lines, with how rtk reaches it, and the values that are its own."""
    node = node_plan.node
    lines = _render_node(plan, node_plan)
    reach = _reach(plan, node_plan)
    if reach:
        lines.insert(1, f"  reach: {reach}")
    return RenderedNode(node.name, node_plan.role, tuple(lines), _own_tokens(node_plan))


def _reach(plan: ClusterPlan, node_plan: NodePlan) -> str:
    """How rtk reaches the node, as the ``ssh`` line that would (``''`` if not over SSH)."""
    if plan.inventory.transport != "ssh":
        return ""
    node = node_plan.node
    ssh = node.ssh
    argv = ["ssh", "-p", str(ssh.port)]
    if ssh.jump_host:
        argv += ["-J", ssh.jump_host]
    if ssh.key_file:
        argv += ["-i", ssh.key_file]
    argv.append(f"{ssh.user}@{node.address}" if ssh.user else node.address)
    return join(argv)


def _own_tokens(node_plan: NodePlan) -> tuple[Token, ...]:
    node = node_plan.node
    tokens: tuple[Token, ...] = (
        Token(NAME, node.name),
        Token(ADDRESS, node.address),
        Token(SSH_PORT, str(node.ssh.port), prefix="-p "),
    )
    if node_plan.container is not None:
        tokens += name_tokens(node_plan.container)[1:]
    return tokens


def _block_heading(index: int, block: PlanBlock) -> str:
    count = len(block.nodes)
    what = block.role if count == 1 else f"{count:,} {block.role}s"
    own = f"; {', '.join(block.varying)}: each node's own" if block.varying else ""
    return f"block {index}: {what} {block.hostlist()}{own}"


def _excluded_group(nodes: Sequence[str], reasons: Sequence[str]) -> str:
    """``n3 (why)`` as ``Exclusion.describe`` reads, or ``n[3-5] (3 nodes: why)``."""
    why = "; ".join(reasons)
    if len(nodes) == 1:
        return f"{nodes[0]} ({why})" if why else nodes[0]
    return f"{cut_hostlist(nodes)} ({len(nodes):,} nodes{': ' + why if why else ''})"


def _excluded_lines(excluded: Sequence[Exclusion]) -> list[str]:
    """The excluded nodes, one line per reason, at most ``MAX_EXCLUDED_LINES``."""
    by_reason: dict[tuple[str, ...], list[str]] = {}
    for exclusion in excluded:
        by_reason.setdefault(exclusion.reasons, []).append(exclusion.node)
    groups = list(by_reason.items())
    lines = [
        f"  excluded   {_excluded_group(nodes, reasons)}"
        for reasons, nodes in groups[:MAX_EXCLUDED_LINES]
    ]
    rest = sum(len(nodes) for _, nodes in groups[MAX_EXCLUDED_LINES:])
    if rest:
        lines.append(f"  excluded   {rest:,} more node(s) for other reasons; --full lists each")
    return lines


def _render_node(plan: ClusterPlan, node_plan: NodePlan) -> list[str]:
    node = node_plan.node
    gpus = f"{node.gpus} GPU(s) expected, detected by Ray" if node.gpus else "no GPU expected"
    container = node_plan.container
    lines = [f"[{node.name}] {node_plan.role} at {node.address}, {gpus}"]
    if container is not None:
        lines.append(f"  container: {container.describe()}")
    if node_plan.step_container is not None:
        lines.append(f"  container: {node_plan.step_container.describe()}")
    checks = (
        f"; it checks {container.runtime}, the image and the GPU hook too"
        if container is not None
        else ""
    )
    what_ran = "Ray" if container is None else "container"
    for number, step in enumerate(node_steps(plan), 1):
        text = _describe_node_step(plan, node_plan, step, what_ran, checks)
        lines += [f"  {number}. {text[0]}", *(f"       {line}" for line in text[1:])]
    return lines


def _describe_node_step(
    plan: ClusterPlan, node_plan: NodePlan, step: NodeStep, what_ran: str, checks: str
) -> list[str]:
    """One step of a node's bring-up: its first line, then the lines under it."""
    paths = plan.paths
    if step is NodeStep.PROBE:
        return [
            f"probe: {node_plan.probe_command}  {AGENT_NOTE[:-1]}{checks})",
            f"where this cluster's {what_ran} already runs, it is left as it is: the steps",
            "below are skipped",
        ]
    if step is NodeStep.PUT_BACK:
        return [
            f"put back: GPU settings an earlier run left ({paths.temp_dir}/{GPU_RESTORE_FILE}),",
            "when the probe finds them (a failure is one line; the file stays)",
        ]
    if step is NodeStep.STOP_LEFTOVERS:
        return ["stop leftovers: what an earlier run of this cluster left, when the probe finds it"]
    if step is NodeStep.TOKEN:
        return [f"token: write {paths.token_file} (0600): the cluster's token"]
    if step is NodeStep.TLS:
        return [
            f"tls: write {paths.tls_ca_file}, {paths.tls_key_file}, {paths.tls_cert_file} (0600):",
            "the cluster's CA certificate, this node's key and its certificate, signed",
            "by the CA for the node's address, name, host name, Ray address and loopback",
        ]
    if step is NodeStep.ENV:
        env_shown = {
            key: f"<{value.description}>" if isinstance(value, Detect) else value
            for key, value in node_plan.env.items()
        }
        env_lines = env_file(plan, node_plan, env_shown).splitlines()
        after = next(
            (i + 1 for i, line in enumerate(env_lines) if line.startswith(f"{NETWORK_AFTER}=")),
            len(env_lines),
        )
        env_lines[after:after] = describe_profile(plan.inventory.network.profile).splitlines()
        return [f"env: write {paths.env_file} (0600):", *env_lines]
    container = " the container" if node_plan.container else ""
    lines = [f"start{container}:"]
    if node_plan.start_step_options:
        lines.append(f"as an srun step with: {join(node_plan.start_step_options)}")
    return [*lines, node_plan.start_command]


def _down_commands(node_plan: NodePlan) -> tuple[str, ...]:
    """The node's teardown commands, in order: its container's removal first, if any."""
    container = node_plan.container
    first = (container.remove_command(STOP_GRACE_S),) if container is not None else ()
    return (*first, node_plan.stop_command)


def render_down(plan: ClusterPlan) -> str:
    """The teardown plan, a line per node and command (``--dry-run --full``)."""
    lines = _down_header(plan)
    for n in plan.nodes:
        *first, stop = _down_commands(n)
        lines += [f"  [{n.node.name}] {command}" for command in first]
        lines.append(f"  [{n.node.name}] {stop}  {AGENT_NOTE}")
    return "\n".join(lines) + "\n"


def render_down_summary(plan: ClusterPlan) -> str:
    """The teardown plan, a line per command shape with its host list (``--dry-run``)."""
    blocks = group_nodes(
        [RenderedNode(n.name, "node", _down_commands(n), _down_tokens(n)) for n in plan.nodes]
    )
    lines = _down_header(plan)
    for block in blocks:
        count = f" ({len(block.nodes):,} nodes)" if len(block.nodes) > 1 else ""
        own = f"; {', '.join(block.varying)}: each node's own" if block.varying else ""
        *first, stop = block.lines
        if first:
            many = f"{len(block.nodes):,} nodes" if len(block.nodes) > 1 else ""
            note = "; ".join(w for w in (many, own.removeprefix("; ")) if w)
            lines.append(f"  [{block.hostlist()}]" + (f" ({note})" if note else ""))
            lines += [f"      {command}" for command in first]
            lines.append(f"      then {stop}  {AGENT_NOTE}")
        else:
            lines.append(f"  [{block.hostlist()}]{count} {stop}  {AGENT_NOTE}{own}")
    lines.append(
        f"total: {len(plan.nodes):,} node(s) in {len(blocks)} block(s); --full shows every node"
    )
    return "\n".join(lines) + "\n"


def _down_tokens(node_plan: NodePlan) -> tuple[Token, ...]:
    """The node's own values in its teardown commands: name and address, no SSH port."""
    return tuple(t for t in _own_tokens(node_plan) if t.placeholder != SSH_PORT)


def _down_header(plan: ClusterPlan) -> list[str]:
    lines = [
        f"plan: rtk down, cluster {plan.inventory.name!r} from {plan.inventory.source}",
        "  on every node, in parallel: stop the processes carrying "
        f"RTK_CLUSTER_DIR={plan.paths.temp_dir} (SIGTERM, then SIGKILL), then remove "
        f"{plan.paths.temp_dir}; any other Ray on the node is left alone",
    ]
    if any(n.container is not None for n in plan.nodes):
        lines.append(
            f"  first, on a node with a container: stop it (SIGTERM, SIGKILL after "
            f"{STOP_GRACE_S:g} s) and remove it, if it has rtk's name for it and the labels "
            f"{CLUSTER_LABEL}={plan.inventory.name} and {NODE_LABEL}=<node>; no other "
            "container is touched"
        )
    return lines
