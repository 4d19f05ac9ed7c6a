"""The ``rtk`` command line: a thin layer over the library that parses and renders."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from toolkit import __version__
from toolkit.cli.cmd_cluster import down_cmd, status_cmd, up_cmd
from toolkit.cli.cmd_demo import demo_cmd
from toolkit.cli.cmd_env import env_cmd
from toolkit.cli.cmd_exec import exec_cmd
from toolkit.cli.cmd_inventory import inventory_group
from toolkit.cli.cmd_jobs import jobs_cmd, launch_cmd, logs_cmd, stop_cmd
from toolkit.cli.cmd_preflight import preflight_cmd
from toolkit.cli.cmd_profile import profile_cmd
from toolkit.cli.cmd_report import report_cmd
from toolkit.cli.cmd_sandbox import sandbox_group
from toolkit.cli.cmd_sbatch import sbatch_group
from toolkit.cli.cmd_shell import shell_cmd
from toolkit.cli.cmd_telemetry import telemetry_group
from toolkit.cli.cmd_train import train_cmd
from toolkit.errors import RtkError
from toolkit.flows import transports_from

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
  rtk launch inv.yaml --no-wait -- CMD   any command as a Ray job; rtk jobs/logs/stop
  rtk report RUN_DIR             energy per node, GPU, step and token; report.html
  rtk telemetry record inv.yaml -- CMD   telemetry around any workload
  rtk profile sweep.yaml         a sweep (sizes, batch, nodes, power limits): energy vs speed
  rtk down inv.yaml              stop rtk's Ray (and only rtk's) everywhere
  rtk sbatch submit inv.yaml     the same flow as one SLURM batch job

Every command that changes nodes takes --dry-run; data commands take --json.
"""


@click.group(
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
        ctx.with_resource(transports_from(factory))


cli.add_command(inventory_group)
cli.add_command(up_cmd)
cli.add_command(status_cmd)
cli.add_command(down_cmd)
cli.add_command(demo_cmd)
cli.add_command(sandbox_group)
cli.add_command(exec_cmd)
cli.add_command(train_cmd)
cli.add_command(launch_cmd)
cli.add_command(jobs_cmd)
cli.add_command(logs_cmd)
cli.add_command(stop_cmd)
cli.add_command(telemetry_group)
cli.add_command(report_cmd)
cli.add_command(preflight_cmd)
cli.add_command(env_cmd)
cli.add_command(shell_cmd)
cli.add_command(shell_cmd, name="ssh")
cli.add_command(profile_cmd)
cli.add_command(sbatch_group)


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
