"""The bring-up plan: a pure function from inventory to per-node commands and files.

Nothing here touches a node. ``rtk up --dry-run`` prints this plan, and the executor
(``toolkit.lifecycle.start``) runs exactly these commands, so what a user reads is what
happens. Values a node reports at run time (its address on the route to the head,
that route's interface) appear as ``Detect`` placeholders until the probe fills them;
the NCCL variables of the network profile (``toolkit.netenv``) depend on the node's
HCAs, so ``fill_env`` inserts them, after ``NETWORK_AFTER``, once the probe is in.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolkit.cluster.containers.docker import ContainerPlan, container_plan
from toolkit.cluster.containers.slurm_step import StepContainerPlan, step_container_plan
from toolkit.cluster.exclude import inventory_without
from toolkit.inventory import Inventory, Node
from toolkit.nodeinfo import AGENT
from toolkit.ray_resources import NODE_RESOURCE, host_resource
from toolkit.rundir.pack import PACK_PATTERNS
from toolkit.rundir.preflight import Exclusion
from toolkit.shell import join, with_env_file
from toolkit.transport import transport_class

STOP_GRACE_S = 8.0
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# The env file entry after which the network profile's variables go.
NETWORK_AFTER = "NCCL_SOCKET_IFNAME"
# Ray starts every worker and job supervisor through ``bash -c``, which reads ~/.bashrc
# when one of these (set by sshd) is in its environment: a conda or pyenv init there put
# another Python before the inventory's on PATH, and ``python`` in a job was not the
# cluster's. Ray's daemons lose them before they start.
SSH_SESSION_VARIABLES = ("SSH_CLIENT", "SSH2_CLIENT")
# The Python that runs rtk's agent inside a container, for the commands that import Ray.
CONTAINER_PYTHON = "python3"
# What ``ray start`` prints once the node runs (``--block`` keeps it running after;
# see ``Transport.start_daemon``, and a container's start, which waits for it).
RAY_READY_TEXT = "Ray runtime started."
# What Ray reads to speak TLS (``tls_env``); clients of another cluster must not keep them.
TLS_VARIABLES = ("RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")


@dataclass(frozen=True)
class Detect:
    """An env-file value the node's probe supplies (``fact`` names the probe field)."""

    fact: str
    description: str


EnvValue = str | Detect


@dataclass(frozen=True)
class ClusterPaths:
    """Where rtk and Ray keep their files on every node."""

    temp_dir: str

    @property
    def rtk_dir(self) -> str:
        """Rtk's own files (env file, token), mode 0700."""
        return posixpath.join(self.temp_dir, "rtk")

    @property
    def env_file(self) -> str:
        """The node's environment for ``ray start`` and everything Ray runs."""
        return posixpath.join(self.rtk_dir, "node.env")

    @property
    def token_file(self) -> str:
        """Ray's authentication token, mode 0600."""
        return posixpath.join(self.rtk_dir, "auth_token")

    @property
    def tls_ca_file(self) -> str:
        """The cluster CA's certificate (``RAY_TLS_CA_CERT``), mode 0600."""
        return posixpath.join(self.rtk_dir, "tls_ca.crt")

    @property
    def tls_cert_file(self) -> str:
        """The node's certificate (``RAY_TLS_SERVER_CERT``), mode 0600."""
        return posixpath.join(self.rtk_dir, "tls_node.crt")

    @property
    def tls_key_file(self) -> str:
        """The node's private key (``RAY_TLS_SERVER_KEY``), mode 0600."""
        return posixpath.join(self.rtk_dir, "tls_node.key")


@dataclass(frozen=True)
class NodePlan:
    """What rtk does on one node.

    With ``container``, ``start_command`` starts the node's container (``ray start``
    inside it) and the probe checks the container's runtime too; ``stop_command`` is
    still the node agent's, run after the container is removed (``lifecycle.down``).
    With ``step_container`` (pyxis, apptainer under SLURM) Ray's srun step runs in the
    container: ``start_step_options`` are srun's options for that step (pyxis), and
    ``start_command`` runs inside the container (apptainer wraps it); the step's end
    ends the container, so stopping is as on the host.
    """

    node: Node
    role: str
    ports: tuple[int, ...]
    env: Mapping[str, EnvValue]
    probe_command: str
    start_argv: tuple[str, ...]
    start_command: str
    stop_command: str
    container: ContainerPlan | None = None
    step_container: StepContainerPlan | None = None
    start_step_options: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The node's name."""
        return self.node.name


@dataclass(frozen=True)
class ClusterPlan:
    """The whole bring-up (and teardown) of one cluster.

    ``inventory`` and ``nodes`` are the nodes brought up; ``excluded`` the inventory's
    nodes left out (``rtk up --exclude``), and why.
    """

    inventory: Inventory
    paths: ClusterPaths
    auth: bool
    dashboard_url: str
    head_address: str
    nodes: tuple[NodePlan, ...]
    excluded: tuple[Exclusion, ...] = ()
    tls: bool = False

    @property
    def head(self) -> NodePlan:
        """The head's plan (always first)."""
        return self.nodes[0]

    @property
    def workers(self) -> tuple[NodePlan, ...]:
        """Every other node's plan."""
        return self.nodes[1:]

    def status_command(self) -> str:
        """Command run on the head that prints Ray's node list as JSON (agent on stdin).

        With a dashboard the agent asks it over HTTP (the host's Python will do);
        without, it imports Ray, so in a container it runs there.
        """
        if self.inventory.ray.include_dashboard:
            return AGENT.command(
                self.head.node,
                "status",
                self.dashboard_url,
                self.head_address,
                env_file=self.paths.env_file,
            )
        return self._ray_agent_command("status", "-", self.head_address)

    def pack_command(self, run_dir: str, out_path: str) -> str:
        """Command run on the head that packs a run directory's results into ``out_path``.

        The agent takes what the run directory's pack list names (``PACK_PATTERNS``).
        """
        return AGENT.command(self.head.node, "pack", run_dir, out_path, ",".join(PACK_PATTERNS))

    def smoke_command(self) -> str:
        """Command run on the head that runs one Ray task on every node (agent on stdin)."""
        hosts = ",".join(n.name for n in self.nodes)
        return self._ray_agent_command("smoke", self.head_address, hosts)

    def _ray_agent_command(self, *args: str) -> str:
        """An agent command that imports Ray: in the head's container when it has one.

        There the image's ``python3`` runs it (the env file puts the directory of the
        inventory's ``ray`` first on PATH); the agent still comes on stdin.
        """
        container = self.head.container
        if container is None:
            return AGENT.command(self.head.node, *args, env_file=self.paths.env_file)
        line = with_env_file(self.paths.env_file, join([CONTAINER_PYTHON, "-", *args]))
        return container.exec_command(line)


def build_plan(inventory: Inventory, excluded: Sequence[Exclusion] = ()) -> ClusterPlan:
    """Plan the cluster: head first, then workers in inventory order, none of ``excluded``.

    Raises:
        ExcludeError: ``excluded`` names a node not in the inventory, the head, or
            leaves fewer than ``min_nodes`` nodes.
    """
    inventory = inventory_without(inventory, excluded)
    paths = ClusterPaths(inventory.temp_dir)
    head = inventory.head
    head_address = f"{head.address}:{inventory.ports.gcs}"
    dash_host = inventory.dashboard_host
    url_host = head.address if dash_host in WILDCARD_HOSTS else dash_host
    nodes = [_node_plan(inventory, paths, head, "head", head_address)]
    nodes += [_node_plan(inventory, paths, w, "worker", head_address) for w in inventory.workers]
    return ClusterPlan(
        inventory=inventory,
        paths=paths,
        auth=inventory.ray.auth == "token",
        dashboard_url=f"http://{_bracket(url_host)}:{inventory.ports.dashboard}",
        head_address=head_address,
        nodes=tuple(nodes),
        excluded=tuple(excluded),
        tls=inventory.ray.tls,
    )


def _node_plan(
    inv: Inventory, paths: ClusterPaths, node: Node, role: str, head_address: str
) -> NodePlan:
    ports = _node_ports(inv, role)
    container = container_plan(inv, node, paths.temp_dir, paths.rtk_dir)
    step_container = step_container_plan(inv, node, paths.temp_dir, paths.rtk_dir)
    probe = AGENT.command(
        node,
        "probe",
        inv.head.address,
        paths.temp_dir,
        ",".join(str(p) for p in ports),
        inv.network.interface or "",
        *([container.probe_request()] if container else []),
    )
    start_argv = tuple(_ray_start_argv(inv, paths, node, role, head_address))
    ray_start = join(start_argv) + ' --node-ip-address="$RTK_NODE_IP"'
    if container is not None:
        # The container's PID 1 (after its init) is ray start, which stays there.
        inner = with_env_file(paths.env_file, f"exec {ray_start} --block")
        start = container.start_command(inner, RAY_READY_TEXT, inv.ray.start_timeout_s)
    else:
        # Where a command's processes end with it (srun), ray start stays in the foreground;
        # in a step's container too (apptainer's wraps it, pyxis's is the step itself).
        block = " --block" if transport_class(inv).daemons_in_foreground else ""
        ray_line = f"exec {ray_start}{block}"
        if step_container is not None:
            ray_line = step_container.wrap(paths.env_file, ray_line)
        start = with_env_file(
            paths.env_file, f"unset {' '.join(SSH_SESSION_VARIABLES)} && {ray_line}"
        )
    stop = AGENT.command(node, "stop", paths.temp_dir, f"{STOP_GRACE_S:g}")
    return NodePlan(
        node=node,
        role=role,
        ports=ports,
        env=_node_env(inv, paths, node, head_address),
        probe_command=probe,
        start_argv=start_argv,
        start_command=start,
        stop_command=stop,
        container=container,
        step_container=step_container,
        start_step_options=step_container.step_options() if step_container else (),
    )


def _node_ports(inv: Inventory, role: str) -> tuple[int, ...]:
    p = inv.ports
    ports = [
        p.node_manager,
        p.object_manager,
        p.runtime_env_agent,
        p.dashboard_agent_grpc,
        p.dashboard_agent_listen,
        p.metrics_export,
    ]
    if role == "head":
        ports = [p.gcs, p.dashboard, p.client_server, *ports]
    return tuple(ports)


def _node_env(
    inv: Inventory, paths: ClusterPaths, node: Node, head_address: str
) -> dict[str, EnvValue]:
    route = f"the route to the head ({inv.head.address})"
    env: dict[str, EnvValue] = {
        "RTK_CLUSTER": inv.name,
        "RTK_CLUSTER_DIR": paths.temp_dir,
        "RTK_NODE": node.name,
        "RTK_HEAD_ADDRESS": head_address,
        "RTK_NODE_IP": Detect("node_ip", f"source address of {route}"),
        "RAY_USAGE_STATS_ENABLED": "0",
        # Every Ray process here inherits it: code in Ray's workers that finds "the"
        # cluster (Ray Train's PlacementGroupCleaner asks the state API) otherwise looks
        # for the node's running clusters, and fails where two share the node (two
        # SLURM jobs, a sandbox) with "Found multiple active Ray instances".
        "RAY_ADDRESS": head_address,
    }
    if inv.ray.auth == "token":
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = paths.token_file
    else:
        env["RAY_AUTH_MODE"] = "disabled"
    if inv.ray.tls:
        env.update(tls_env(paths.tls_ca_file, paths.tls_cert_file, paths.tls_key_file))
    interface: EnvValue = inv.network.interface or Detect("interface", f"interface of {route}")
    env["GLOO_SOCKET_IFNAME"] = interface
    env["NCCL_SOCKET_IFNAME"] = interface
    env.update(inv.network.env)
    env.update(node.env)
    return env


def tls_env(ca_file: str, cert_file: str, key_file: str) -> dict[str, str]:
    """Ray's TLS variables (``TLS_VARIABLES``) for the given files.

    Every Ray process serves and dials with this certificate and key, and accepts only
    peers whose certificate the CA signed.
    """
    return {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": cert_file,
        "RAY_TLS_SERVER_KEY": key_file,
        "RAY_TLS_CA_CERT": ca_file,
    }


def _ray_start_argv(
    inv: Inventory, paths: ClusterPaths, node: Node, role: str, head_address: str
) -> list[str]:
    p = inv.ports
    argv = [*node.ray, "start"]
    if role == "head":
        argv += [
            "--head",
            f"--port={p.gcs}",
            f"--dashboard-port={p.dashboard}",
            f"--dashboard-host={inv.dashboard_host}",
            f"--include-dashboard={str(inv.ray.include_dashboard).lower()}",
            f"--ray-client-server-port={p.client_server}",
        ]
    else:
        argv.append(f"--address={head_address}")
    argv += [
        f"--node-manager-port={p.node_manager}",
        f"--object-manager-port={p.object_manager}",
        f"--runtime-env-agent-port={p.runtime_env_agent}",
        f"--dashboard-agent-grpc-port={p.dashboard_agent_grpc}",
        f"--dashboard-agent-listen-port={p.dashboard_agent_listen}",
        f"--metrics-export-port={p.metrics_export}",
        f"--min-worker-port={p.min_worker}",
        f"--max-worker-port={p.max_worker}",
        f"--temp-dir={paths.temp_dir}",
    ]
    if node.cpus is not None:
        argv.append(f"--num-cpus={node.cpus}")
    if inv.ray.object_store_memory is not None:
        argv.append(f"--object-store-memory={inv.ray.object_store_memory}")
    resources = {host_resource(node.name): 1.0, NODE_RESOURCE: 1.0, **node.resources}
    argv += [f"--resources={json.dumps(resources, sort_keys=True)}", "--disable-usage-stats"]
    return argv


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def fill_env(
    plan: NodePlan, facts: Mapping[str, str | None], network: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The node's env file values, with every ``Detect`` replaced by the probe's fact.

    Args:
        plan: The node's plan.
        facts: The probe's values by ``Detect.fact`` name (``node_ip``, ``interface``):
            ``toolkit.nodeinfo.probe.ProbeFacts.detected()``.
        network: The network profile's variables for this node (``NetEnv.variables``);
            they go after ``NETWORK_AFTER``, except those the plan already sets (the
            inventory's own values, which win).

    Raises:
        KeyError: The probe did not report a fact the env needs (its name).
    """
    env: dict[str, str] = {}
    for key, value in plan.env.items():
        if isinstance(value, Detect):
            fact = facts.get(value.fact)
            if not fact:
                raise KeyError(value.fact)
            env[key] = fact
        else:
            env[key] = value
        if key == NETWORK_AFTER and network:
            env.update({k: v for k, v in network.items() if k not in plan.env})
    return env
