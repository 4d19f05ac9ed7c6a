"""What ``rtk torchrun`` checks before anything starts, from the user's machine.

A missing script, more ranks than a node has GPUs, or a rendezvous port some other
process holds would otherwise surface minutes later as a stack of torchrun and c10d
tracebacks on every node. Each is one line here, raised before the job is submitted;
the job's driver checks again on the nodes (``toolkit.torchrun.fanout``), for what
only they can see.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.cluster.command import node_command
from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import TorchrunError
from toolkit.shell import join
from toolkit.stall.settings import RESTART_EXCLUDING
from toolkit.torchrun.spec import TorchrunSpec, nproc_problem
from toolkit.transport.base import Transport

PORT_CHECK_TIMEOUT_S = 30.0
# Exits 3 when the port is taken: bind fails though SO_REUSEADDR forgives TIME_WAIT.
_PORT_PROBE = (
    "import socket,sys\n"
    "s=socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
    "try:\n s.bind(('',int(sys.argv[1])))\n"
    "except OSError as e:\n print(e); sys.exit(3)\n"
)
PORT_TAKEN_EXIT = 3


def script_problem(spec: TorchrunSpec, working_dir: str) -> str | None:
    """Why the script cannot be found, or None.

    A relative script is shipped to every node inside ``working_dir``, so it must be
    there now; an absolute one is checked on the nodes by the job.
    """
    if spec.module or Path(spec.script).is_absolute():
        return None
    if (Path(working_dir) / spec.script).is_file():
        return None
    return (
        f"{spec.script}: no such file in the working directory {working_dir} (shipped "
        "to every node); give the script's path relative to --working-dir"
    )


def check_request(spec: TorchrunSpec, plan: ClusterPlan, working_dir: str) -> None:
    """Refuse what the request alone shows wrong: the script, ranks against declared GPUs.

    Raises:
        TorchrunError: One line saying what is wrong and how to fix it.
    """
    why = script_problem(spec, working_dir)
    if why is None and spec.stall.policy == RESTART_EXCLUDING:
        why = (
            "--on-stall restart-excluding resumes Ray Train's runs (rtk train) from their "
            "checkpoints; a torchrun script resumes itself: use --on-stall abort, then run "
            "again with the suspect nodes left out (rtk up --exclude)"
        )
    if why is None:
        for node_plan in plan.nodes:
            why = nproc_problem(spec, node_plan.name, node_plan.node.gpus)
            if why is not None:
                break
    if why is not None:
        raise TorchrunError(why)


def check_port(spec: TorchrunSpec, plan: ClusterPlan, transport: Transport) -> None:
    """Refuse a rendezvous port another process listens on, on the head.

    Raises:
        TorchrunError: The port is taken (or the head could not be asked).
    """
    head = plan.head
    argv = [head.node.python, "-c", _PORT_PROBE, str(spec.rdzv_port)]
    result = transport.run(
        head.node, node_command(head, join(argv)), timeout_s=PORT_CHECK_TIMEOUT_S
    )
    if result.exit_code == PORT_TAKEN_EXIT:
        raise TorchrunError(
            f"the rendezvous port {spec.rdzv_port} on the head {head.name} is in use by "
            "another process; stop it, or pick a free one (--rdzv-port, or "
            "ports.rendezvous in the inventory)"
        )
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise TorchrunError(
            f"could not check the rendezvous port on the head {head.name}: "
            f"{detail[-1] if detail else f'exit {result.exit_code}'}"
        )
