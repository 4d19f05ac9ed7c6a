"""Bring a run's results from the head to this machine when they are not here already.

The job writes the run directory on the head (and, with a shared filesystem, everywhere).
When rtk runs elsewhere, say a laptop, the telemetry, markers and metrics (never the
checkpoints) are packed on the head by the node agent and unpacked here.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError
from toolkit.node import call_agent
from toolkit.transport.base import Transport

FETCH_TIMEOUT_S = 300.0


def fetch_run(plan: ClusterPlan, transport: Transport, run_dir: str, dest: Path) -> list[str]:
    """Copy ``run_dir``'s results from the head into ``dest``; return the files copied.

    Raises:
        ClusterError: The head has no such run directory, or the archive is unreadable.
        toolkit.errors.TransportError: The head could not be reached.
    """
    answer = call_agent(transport, plan.head.node, plan.pack_command(run_dir), FETCH_TIMEOUT_S)
    try:
        data = base64.b64decode(answer["tar_gz_b64"])
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(dest, filter="data")
    except (KeyError, ValueError, tarfile.TarError, OSError) as e:
        raise ClusterError(f"could not unpack {run_dir} from {plan.head.node.name}: {e}") from e
    return [str(name) for name in answer.get("files", [])]
