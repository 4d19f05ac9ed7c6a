"""Plain-text renderings of a plan: what ``--dry-run`` prints."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from toolkit.cluster.plan import NETWORK_AFTER, ClusterPlan, Detect, NodePlan
from toolkit.netenv import describe_profile
from toolkit.resources import render


def env_file(plan: ClusterPlan, node_plan: NodePlan, env: Mapping[str, str]) -> str:
    """The text of a node's env file (``templates/node.env.j2``)."""
    return render(
        "node.env.j2",
        cluster=plan.inventory.name,
        node=node_plan.name,
        path=plan.paths.env_file,
        env=env,
        path_first=python_bin_dir(node_plan.node.python),
    )


def python_bin_dir(python: str) -> str:
    """The directory of the node's Python when the inventory names it by path, else ''.

    That directory (a venv's ``bin``) goes first on PATH in the node's env file.
    """
    return posixpath.dirname(python) if posixpath.isabs(python) else ""


def render_up(plan: ClusterPlan) -> str:
    """The bring-up plan, node by node, in the order rtk runs it."""
    inv = plan.inventory
    p = inv.ports
    lines = [
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
        f"  ports      gcs {p.gcs}, dashboard {p.dashboard}, client {p.client_server}, "
        f"node manager {p.node_manager}, object manager {p.object_manager},",
        f"             runtime env agent {p.runtime_env_agent}, dashboard agent "
        f"{p.dashboard_agent_grpc}/{p.dashboard_agent_listen}, metrics {p.metrics_export}, "
        f"workers {p.min_worker}-{p.max_worker}",
        f"  dashboard  {plan.dashboard_url}",
        f"  wait       until {inv.min_nodes} of {len(plan.nodes)} node(s) are alive with their "
        f"GPUs and resources, at most {inv.ray.wait_timeout_s:g} s",
    ]
    lines += [f"  excluded   {e.describe()}" for e in plan.excluded]
    for index, node_plan in enumerate(plan.nodes):
        if index == 1:
            lines += ["", "workers start in parallel once the head is up"]
        lines += ["", *_render_node(plan, node_plan)]
    return "\n".join(lines) + "\n"


def _render_node(plan: ClusterPlan, node_plan: NodePlan) -> list[str]:
    node = node_plan.node
    env_shown = {
        key: f"<{value.description}>" if isinstance(value, Detect) else value
        for key, value in node_plan.env.items()
    }
    gpus = f"{node.gpus} GPU(s) expected, detected by Ray" if node.gpus else "no GPU expected"
    lines = [
        f"[{node.name}] {node_plan.role} at {node.address}, {gpus}",
        f"  1. probe: {node_plan.probe_command}  (rtk node agent on stdin)",
    ]
    step = 2
    if plan.auth:
        lines.append(f"  {step}. write {plan.paths.token_file} (0600): the cluster's token")
        step += 1
    lines.append(f"  {step}. write {plan.paths.env_file} (0600):")
    env_lines = env_file(plan, node_plan, env_shown).splitlines()
    after = next(
        (i + 1 for i, line in enumerate(env_lines) if line.startswith(f"{NETWORK_AFTER}=")),
        len(env_lines),
    )
    env_lines[after:after] = describe_profile(plan.inventory.network.profile).splitlines()
    lines += [f"       {line}" for line in env_lines]
    lines.append(f"  {step + 1}. start (skipped when this cluster's Ray already runs there):")
    lines.append(f"       {node_plan.start_command}")
    return lines


def render_down(plan: ClusterPlan) -> str:
    """The teardown plan."""
    lines = [
        f"plan: rtk down, cluster {plan.inventory.name!r} from {plan.inventory.source}",
        "  on every node, in parallel: stop the processes carrying "
        f"RTK_CLUSTER_DIR={plan.paths.temp_dir} (SIGTERM, then SIGKILL), then remove "
        f"{plan.paths.temp_dir}; any other Ray on the node is left alone",
    ]
    lines += [f"  [{n.node.name}] {n.stop_command}  (rtk node agent on stdin)" for n in plan.nodes]
    return "\n".join(lines) + "\n"
