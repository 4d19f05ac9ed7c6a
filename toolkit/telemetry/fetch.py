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
import shutil
import tarfile
import uuid
from pathlib import Path, PurePosixPath

from toolkit.cluster.plan import ClusterPlan
from toolkit.errors import ClusterError, TransportError
from toolkit.nodeinfo import call_agent
from toolkit.nodeinfo.answer_errors import answer_fields
from toolkit.shell import join
from toolkit.transport.base import Transport

FETCH_TIMEOUT_S = 300.0


def unpack(archive: Path, dest: Path) -> list[str]:
    """Unpack a run's archive into ``dest``, file by file; returns the names unpacked.

    Only plain files and folders below ``dest`` are taken (no links, devices, absolute
    names or ``..``), on every Python 3.11 (``extractall``'s ``filter`` came in 3.11.4).

    Raises:
        ValueError: The archive holds something else.
    """
    names = []
    with tarfile.open(archive, mode="r:gz") as tar:
        for member in tar:
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                raise ValueError(f"refusing {member.name!r}: not a plain file inside the run")
            target = dest.joinpath(*name.parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                raise ValueError(f"refusing {member.name!r}: unreadable in the archive")
            with source, target.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            names.append(str(name))
    return names


def fetch_run(plan: ClusterPlan, transport: Transport, run_dir: str, dest: Path) -> list[str]:
    """Copy ``run_dir``'s results from the head into ``dest``; return the files copied.

    Raises:
        ClusterError: The head has no such run directory, or the archive is unreadable.
        toolkit.errors.TransportError: The head could not be reached.
    """
    head = plan.head.node
    remote = posixpath.join(plan.paths.temp_dir, f"rtk-pack-{uuid.uuid4().hex[:12]}.tar.gz")
    answer = call_agent(transport, head, plan.pack_command(run_dir, remote), FETCH_TIMEOUT_S)
    files = answer_fields(head.name, "pack answer", answer).texts("files")
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / f".{Path(remote).name}"
    try:
        transport.get(head, remote, archive)
        unpack(archive, dest)
    except (KeyError, ValueError, tarfile.TarError, OSError) as e:
        raise ClusterError(f"could not unpack {run_dir} from {head.name}: {e}") from e
    finally:
        archive.unlink(missing_ok=True)
        with contextlib.suppress(TransportError):  # the temp dir goes with rtk down anyway
            transport.run(head, f"rm -f {join([remote])}", timeout_s=30.0)
    return list(files)
