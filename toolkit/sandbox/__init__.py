"""Sandbox: a real multi-node test cluster on this one Linux machine (needs root).

Each node is a set of namespaces (network, PID, mount, UTS) with its own address on a
host bridge, host name, process table, /tmp, /dev/shm and /run, and a real sshd that
accepts root logins with a generated key. ``create`` writes an rtk inventory for it,
so ``rtk up`` can bring Ray up across the nodes exactly as on real machines::

    sandbox = create(3, name="demo", subnet="10.77.0")
    print(sandbox.inventory_path)        # /tmp/rtk-sb-demo/inventory.yaml
    sandbox.run_in("node1", ["ps", "-e"], timeout_s=10)
    sandbox.destroy()                    # or destroy("demo") from anywhere

With ``slurm=True`` the nodes also form a real SLURM cluster (``toolkit.sandbox.slurm``);
``sandbox.slurm_env()`` is the environment SLURM's commands need (``SLURM_CONF``).
"""

from __future__ import annotations

from toolkit.errors import SandboxError
from toolkit.sandbox.creation import create
from toolkit.sandbox.hostcheck import check_host
from toolkit.sandbox.sandbox import Sandbox, SandboxNode
from toolkit.sandbox.status import (
    NodeStatus,
    SandboxStatus,
    SlurmStatus,
    list_sandboxes,
    sandbox_status,
)
from toolkit.sandbox.teardown import destroy

__all__ = [
    "NodeStatus",
    "Sandbox",
    "SandboxError",
    "SandboxNode",
    "SandboxStatus",
    "SlurmStatus",
    "check_host",
    "create",
    "destroy",
    "list_sandboxes",
    "sandbox_status",
]
