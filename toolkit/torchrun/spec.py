"""What ``rtk torchrun`` runs on every node, as data (pure, printable).

One ``torchrun`` per node, all meeting at a c10d rendezvous on the head's pinned port
(``ports.rendezvous``): ranks are given out by the rendezvous, so every node runs the
same command line and only ``--nproc-per-node`` may differ (a node's GPUs, or 1 on a
node without one). ``node_argv`` builds it; ``TorchrunSpec`` travels as JSON to the
job's driver on the head (``toolkit.torchrun.fanout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toolkit.json_types import JsonObject
from toolkit.power.settings import PowerSettings
from toolkit.rundir.record_base import record_fields
from toolkit.stall.settings import WatchSettings

# torchrun's module, run by the node's Python (the ``torchrun`` script may not be on
# the PATH of a Ray worker, the module always is where torch is).
TORCHRUN = ("-m", "torch.distributed.run")
AUTO_STEPS_MODULE = "toolkit.markers.auto_steps"
# Runs the script as ``python SCRIPT`` would and ends the rank without the interpreter's
# finalization, where torch 2.13's gloo ranks abort after the script has ended and
# torchrun then fails the whole job (a few runs of ten of a plain DDP script).
SCRIPT_RUNNER_MODULE = "toolkit.markers.script_runner"


@dataclass(frozen=True)
class TorchrunSpec:
    """A user's ``rtk torchrun`` request.

    Attributes:
        script: The training script, as given (relative to the working directory).
        args: Its arguments.
        nproc_per_node: Processes per node; None: the node's GPUs, or 1 without GPUs.
        auto_steps: Count steps by optimizer hooks (``toolkit.markers.auto_steps``).
        env: Variables for every rank on every node (``--env``), after rtk's own.
        rdzv_port: The head's port for the c10d rendezvous.
        run_id: The rendezvous id (the run's id: two runs never meet).
        max_restarts: torchrun's ``--max-restarts``.
        module: Run ``script`` as a module (torchrun's ``-m``).
        stall: How the driver's watchdog watches the run (``--on-stall``...).
        power: How the driver's power policy sets the GPUs' limits (``--power-policy``).
    """

    script: str
    args: tuple[str, ...] = ()
    nproc_per_node: int | None = None
    auto_steps: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    rdzv_port: int = 29400
    run_id: str = "rtk"
    max_restarts: int = 0
    module: bool = False
    stall: WatchSettings = field(default_factory=WatchSettings)
    power: PowerSettings = field(default_factory=PowerSettings)

    def to_json(self) -> JsonObject:
        """A JSON-ready object (the driver's argument)."""
        power = {"power": self.power.to_json()} if self.power.acts else {}
        return {
            "script": self.script,
            "args": list(self.args),
            "nproc_per_node": self.nproc_per_node,
            "auto_steps": self.auto_steps,
            "env": dict(self.env),
            "rdzv_port": self.rdzv_port,
            "run_id": self.run_id,
            "max_restarts": self.max_restarts,
            "module": self.module,
            "stall": self.stall.to_json(),
            **power,
        }

    @classmethod
    def from_json(cls, data: object) -> TorchrunSpec:
        """The inverse of ``to_json``.

        Raises:
            toolkit.errors.RunDirError: A field is missing or of the wrong type.
        """
        f = record_fields(data, "torchrun spec")
        env = f.obj("env")
        return cls(
            script=f.text("script"),
            args=tuple(f.texts("args")),
            nproc_per_node=f.integer_or_none("nproc_per_node"),
            auto_steps=f.flag("auto_steps"),
            env={str(k): str(v) for k, v in env.items()},
            rdzv_port=f.integer("rdzv_port"),
            run_id=f.text("run_id"),
            max_restarts=f.integer("max_restarts"),
            module=f.flag("module"),
            stall=WatchSettings.from_json(f.obj_or_none("stall") or {}),
            power=PowerSettings.from_json(f.obj_or_none("power") or {}),
        )


def nproc_for(spec: TorchrunSpec, gpus: int) -> int:
    """Processes to start on a node with ``gpus`` GPUs: the asked number, else its GPUs, else 1."""
    if spec.nproc_per_node is not None:
        return spec.nproc_per_node
    return gpus if gpus > 0 else 1


def nproc_problem(spec: TorchrunSpec, node: str, gpus: int) -> str | None:
    """Why ``spec`` cannot run on ``node`` (with ``gpus`` GPUs), or None.

    On a node with GPUs a rank per GPU is the most: more would share GPUs (NCCL refuses
    two ranks on one GPU). A node without GPUs runs as many CPU ranks as asked.
    """
    asked = spec.nproc_per_node
    if asked is not None and asked < 1:
        return f"--nproc-per-node {asked}: give 1 or more"
    if asked is not None and gpus > 0 and asked > gpus:
        return (
            f"{node} has {gpus} GPU(s): --nproc-per-node {asked} would put two ranks on "
            f"one GPU; give at most {gpus}, or leave it out (a rank per GPU)"
        )
    return None


def node_argv(
    spec: TorchrunSpec, nnodes: int, head_host: str, nproc: int, *, is_host: bool
) -> list[str]:
    """What a node's Python runs (its path goes first): torchrun, then the script.

    ``is_host``: this node serves the rendezvous (the head). Said outright with
    ``--rdzv-conf is_host=``: left to itself, torchrun's c10d backend serves it only
    where the endpoint matches the machine's hostname or the addresses it resolves to,
    and where /etc/hosts maps the hostname to a loopback address (Debian's and Ubuntu's
    127.0.1.1, a VM's 127.0.0.1) every node, the head too, waits as a client for a
    store nobody serves, until its 60 s connect timeout.
    """
    host = f"[{head_host}]" if ":" in head_host else head_host
    argv = [
        *TORCHRUN,
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host}:{spec.rdzv_port}",
        f"--rdzv-id={spec.run_id}",
        f"--rdzv-conf=is_host={1 if is_host else 0}",
        f"--max-restarts={spec.max_restarts}",
    ]
    # The script runs as __main__ (as python SCRIPT) under rtk's runner: with
    # --auto-steps its hooks go in first.
    argv += ["-m", AUTO_STEPS_MODULE if spec.auto_steps else SCRIPT_RUNNER_MODULE]
    argv += ["-m", spec.script] if spec.module else [spec.script]
    return [*argv, *spec.args]
