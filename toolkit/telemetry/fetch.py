"""Bring a run's results from the head to this machine when they are not here already.

The job writes the run directory on the head (and, with a shared filesystem, everywhere).
When rtk runs elsewhere, say a laptop, the node agent packs the telemetry, markers and
metrics (never the checkpoints) into an archive on the head, in the cluster's temp
directory; rtk copies it here in pieces over the transport (resuming an interrupted
copy), unpacks it and removes it on the head. Neither side holds the run in memory.
"""

from __future__ import annotations

import contextlib
import posixpath
import tarfile
import uuid
from pathlib import Path

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError, TransportError
from toolkit.node import call_agent
from toolkit.shell import join
from toolkit.transport.base import Transport

FETCH_TIMEOUT_S = 300.0


def fetch_run(plan: ClusterPlan, transport: Transport, run_dir: str, dest: Path) -> list[str]:
    """Copy ``run_dir``'s results from the head into ``dest``; return the files copied.

    Raises:
        ClusterError: The head has no such run directory, or the archive is unreadable.
        toolkit.errors.TransportError: The head could not be reached.
    """
    head = plan.head.node
    remote = posixpath.join(plan.paths.temp_dir, f"rtk-pack-{uuid.uuid4().hex[:12]}.tar.gz")
    answer = call_agent(transport, head, plan.pack_command(run_dir, remote), FETCH_TIMEOUT_S)
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / f".{Path(remote).name}"
    try:
        transport.get(head, remote, archive)
        with tarfile.open(archive, mode="r:gz") as tar:
            tar.extractall(dest, filter="data")
    except (KeyError, ValueError, tarfile.TarError, OSError) as e:
        raise ClusterError(f"could not unpack {run_dir} from {head.name}: {e}") from e
    finally:
        archive.unlink(missing_ok=True)
        with contextlib.suppress(TransportError):  # the temp dir goes with rtk down anyway
            transport.run(head, f"rm -f {join([remote])}", timeout_s=30.0)
    return [str(name) for name in answer.get("files", [])]
