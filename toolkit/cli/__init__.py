"""The ``rtk`` command line: a thin layer over the library that parses and renders."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from toolkit import __version__
from toolkit.cli.options.lazy_group import LazyGroup
from toolkit.errors import RtkError

# The key of ``main(obj=...)`` whose value, a function inventory -> Transport, every
# session of the command reaches its nodes with (a simulated cluster, in the benchmark
# and tests); without it each inventory's own transport is used.
TRANSPORT_FACTORY = "transport_factory"

CLI_HELP = """rtk: Ray on your own GPU nodes, checked, trained on, and power-profiled.

\b
Start here:
  rtk demo                       the whole flow on this machine, no inventory
  rtk inventory check inv.yaml   validate a node inventory
  rtk up inv.yaml --dry-run      print what bring-up would do, touch nothing
  rtk up inv.yaml                Ray head + workers, token auth, pinned ports
  rtk status inv.yaml            alive nodes and their resources
  rtk preflight inv.yaml         prove the nodes fit: host, software, ports, clocks
  rtk env inv.yaml               network detected per node, NCCL/Gloo variables and why
  eval "$(rtk env inv.yaml --export)"    then Ray's own CLI: ray status, ray job ...
  rtk shell inv.yaml             a shell on the head with the cluster's environment
  rtk train inv.yaml --barrier-every 5   GPT on Ray Train, with power telemetry
  rtk torchrun inv.yaml -- train.py      torchrun on every node, power-profiled per step
  rtk launch inv.yaml --no-wait -- CMD   any command as a Ray job; rtk jobs/logs/stop
  rtk report RUN_DIR             energy per node, GPU, step and token; report.html
  rtk stall-check inv.yaml RUN   a run slow or stuck: every rank's stack, the suspects named
  rtk telemetry record inv.yaml -- CMD   telemetry around any workload
  rtk profile sweep.yaml         a sweep (sizes, batch, nodes, power limits): energy vs speed
  rtk down inv.yaml              stop rtk's Ray (and only rtk's) everywhere
  rtk sbatch submit inv.yaml     the same flow as one SLURM batch job

Every command that changes nodes takes --dry-run; data commands take --json.
"""


# Each command's module is imported only when that command runs (or for rtk --help).
COMMANDS = {
    "inventory": "toolkit.cli.cmd_inventory:inventory_group",
    "up": "toolkit.cli.cmd_cluster:up_cmd",
    "status": "toolkit.cli.cmd_cluster:status_cmd",
    "down": "toolkit.cli.cmd_cluster:down_cmd",
    "demo": "toolkit.cli.cmd_demo:demo_cmd",
    "sandbox": "toolkit.cli.cmd_sandbox:sandbox_group",
    "exec": "toolkit.cli.cmd_exec:exec_cmd",
    "train": "toolkit.cli.cmd_train:train_cmd",
    "torchrun": "toolkit.cli.cmd_torchrun:torchrun_cmd",
    "launch": "toolkit.cli.cmd_jobs:launch_cmd",
    "jobs": "toolkit.cli.cmd_jobs:jobs_cmd",
    "logs": "toolkit.cli.cmd_jobs:logs_cmd",
    "stop": "toolkit.cli.cmd_jobs:stop_cmd",
    "telemetry": "toolkit.cli.cmd_telemetry:telemetry_group",
    "report": "toolkit.cli.cmd_report:report_cmd",
    "stall-check": "toolkit.cli.cmd_report:stall_check_cmd",
    "preflight": "toolkit.cli.cmd_preflight:preflight_cmd",
    "env": "toolkit.cli.cmd_env:env_cmd",
    "shell": "toolkit.cli.cmd_shell:shell_cmd",
    "ssh": "toolkit.cli.cmd_shell:shell_cmd",
    "profile": "toolkit.cli.cmd_profile:profile_cmd",
    "sbatch": "toolkit.cli.cmd_sbatch:sbatch_group",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    help=CLI_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="rtk")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """The rtk command group (its help is CLI_HELP)."""
    factory = (ctx.obj or {}).get(TRANSPORT_FACTORY)
    if factory is not None:
        if not callable(factory):
            raise TypeError(f"obj[{TRANSPORT_FACTORY!r}] must be callable, got {factory!r}")
        from toolkit.flows import transports_from

        ctx.with_resource(transports_from(factory))


def main(obj: Mapping[str, Any] | None = None, args: Sequence[str] | None = None) -> None:
    """Entry point: expected failures become one message and an exit code.

    Args:
        obj: click's ``ctx.obj`` for the command; ``TRANSPORT_FACTORY`` in it gives
            the transport its sessions use.
        args: The command line after ``rtk`` (default: ``sys.argv[1:]``).
    """
    try:
        cli.main(args=args, standalone_mode=False, obj=dict(obj or {}))
    except click.exceptions.Abort:
        click.echo("rtk: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except RtkError as e:
        for line in str(e).splitlines() or [type(e).__name__]:
            click.echo(f"rtk: {line}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("rtk: interrupted", err=True)
        sys.exit(130)
