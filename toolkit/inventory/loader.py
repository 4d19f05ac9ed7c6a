"""Read an inventory file (or the embedded default) into a resolved ``Inventory``."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from toolkit.errors import InventoryError, Problem
from toolkit.inventory.local_gpus import local_gpu_count
from toolkit.inventory.models import InventorySpec
from toolkit.inventory.problems import format_path, parse_yaml, problems_from_validation
from toolkit.inventory.resolve import resolve
from toolkit.inventory.resolved import Inventory
from toolkit.inventory.yaml_text import restore_written_text

EMBEDDED_SOURCE = "<embedded default>"

# The inventory behind `rtk up --local`: this machine as a one-node cluster. Its ports
# differ from Ray's defaults so that it runs beside a Ray someone started by hand.
EMBEDDED_DEFAULT = """\
cluster: local
transport: local
nodes:
  - host: localhost
    address: 127.0.0.1
ports:
  gcs: 6479
  dashboard: 8365
  client_server: 6478
  node_manager: 6480
  object_manager: 6481
  runtime_env_agent: 6482
  dashboard_agent_grpc: 6483
  dashboard_agent_listen: 6484
  metrics_export: 6485
  rendezvous: 6486
  min_worker: 21000
  max_worker: 22999
ray:
  dashboard_host: 127.0.0.1
"""


def load_inventory(path: str | Path) -> Inventory:
    """Load and validate an inventory file.

    Raises:
        InventoryError: The file is missing, not YAML, or invalid; every problem listed.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryError([Problem(str(path), None, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InventoryError([Problem(str(path), None, "", f"cannot read it: {e}")]) from e
    return parse_inventory(text, str(path), file.resolve().parent)


def default_inventory(gpus: int | None = None) -> Inventory:
    """The embedded one-node inventory for this machine, with its GPUs.

    ``gpus``: as many as given; else as many as NVML counts here (``local_gpu_count``).
    """
    count = local_gpu_count() if gpus is None else gpus
    text = EMBEDDED_DEFAULT
    if count:
        text = text.replace(
            "    address: 127.0.0.1\n", f"    address: 127.0.0.1\n    gpus: {count}\n"
        )
    return parse_inventory(text, EMBEDDED_SOURCE, Path.cwd())


def parse_inventory(text: str, source: str, base_dir: Path) -> Inventory:
    """Validate inventory text.

    Args:
        text: YAML text.
        source: Name used in messages.
        base_dir: Directory that relative paths in the file are relative to.

    Raises:
        InventoryError: Every problem found, one per line.
    """
    located, problems = parse_yaml(text, source, InventoryError)
    if not isinstance(located.data, dict):
        got = "an empty file" if located.data is None else f"a {type(located.data).__name__}"
        problems.append(
            Problem(
                source,
                located.line_of(()),
                "",
                f"got {got}; expected a mapping with cluster: and nodes:",
            )
        )
        raise InventoryError(problems)
    for path, message in restore_written_text(located, InventorySpec):
        problems.append(Problem(source, located.line_of(path), format_path(path), message))
    try:
        spec = InventorySpec.model_validate(located.data)
    except ValidationError as e:
        problems.extend(problems_from_validation(e, InventorySpec, located, source))
        raise InventoryError(problems) from None
    if problems:
        raise InventoryError(problems)
    return resolve(spec, source, base_dir, located.line_of)
