"""The driver of ``rtk torchrun``, on the head: torchrun on every node, together.

``python -m toolkit.torchrun.fanout SPEC_JSON`` runs as the command of rtk's telemetry
job (``toolkit.telemetry.record_job``: the samplers run around it, the ranks' marker
files are gathered and the report built after it). Its workload is every node's
torchrun (``toolkit.torchrun.nodes``): refused with one line per cause when a node
lacks the script or the head's rendezvous port is taken (nothing started), else run
on every node until all end, the first failure ending the others; the job's exit
status is the first failure's, 0 when every node's torchrun succeeded. Beside it, the
job-driver runtime (``toolkit.jobdriver.runtime``) runs the stall watchdog over the
ranks' markers and the power policy; SIGTERM or SIGINT (``rtk stop``, Ctrl-C, the
telemetry job's own stop) puts the GPU limits back and ends torchrun everywhere, and
``--on-stall abort`` ends it with ``STALL_EXIT``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

import ray

from toolkit.jobdriver.runtime import DriverOptions, JobDriver
from toolkit.stall.watchdog import run_dir_from_env
from toolkit.torchrun.nodes import TorchrunNodes
from toolkit.torchrun.spec import TorchrunSpec

EXIT_CANNOT_START = 3


def say(line: str) -> None:
    """A line of rtk's own in the job's log."""
    print(f"rtk torchrun: {line}", flush=True)


def main(argv: list[str]) -> int:
    """Run the spec in ``argv[0]`` on every node; the first failure's exit status."""
    spec = TorchrunSpec.from_json(json.loads(argv[0]))
    ray.init(address="auto", logging_level=logging.ERROR)
    nodes = TorchrunNodes(spec, {"RTK_RUN_DIR": os.environ.get("RTK_RUN_DIR", "")}, say)
    refused = nodes.problems()
    for line in refused:
        say(f"cannot start: {line}")
    if refused:
        return EXIT_CANNOT_START
    options = DriverOptions(
        run_dir_from_env(),
        say,
        stall=spec.stall,
        power=spec.power,
        signals=(signal.SIGTERM, signal.SIGINT),
    )
    return JobDriver(options, nodes).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
