"""``--ray-address``: the cluster a command works on, named the way Ray users name it.

Scripts written for Ray take ``--ray_address auto`` (the running cluster: what
``RAY_ADDRESS`` says, else the one on this machine), ``HOST:PORT`` (a head's GCS) or
``ray://HOST:10001`` (its Ray Client server); Ray's job CLI takes the dashboard,
``http://HOST:8265``. rtk works on clusters it brought up, so an address only picks
one of them:

- with an inventory (the argument, ``--local``, ``--slurm`` or ``$RTK_INVENTORY``),
  ``auto`` is that cluster, and any other address must be its head's;
- without one, ``auto`` is the cluster at ``$RAY_ADDRESS`` (``rtk env --export``
  sets it) or, when that is unset, this machine's ``rtk up --local`` cluster; any
  other address is looked up among the clusters brought up from this machine (their
  records in rtk's state directory).

Whatever the address, rtk's job driver runs on the head, submitted through the
dashboard's Jobs API: a ``ray://`` address is not used to connect a Ray Client.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from toolkit.cluster.plan import ClusterPlan, build_plan
from toolkit.errors import InventoryError, RtkError, StateError
from toolkit.inventory import Inventory, default_inventory, load_inventory
from toolkit.inventory.loader import EMBEDDED_SOURCE
from toolkit.state.store import StateStore, state_root

AUTO = "auto"
# Ray's own defaults, for an address given without a port.
RAY_CLIENT_PORT = 10001
DASHBOARD_PORT = 8265
# What Ray reads as "no address given" in RAY_ADDRESS.
UNSET_VALUES = ("", AUTO)
# Known clusters named in an error, at most (the rest are counted).
LISTED_AT_MOST = 8

FORMS = (
    "auto, HOST:PORT (the head's GCS), ray://HOST:PORT (its Ray Client port) "
    "or http://HOST:PORT (its dashboard)"
)


class AddressKind(enum.Enum):
    """Which of the head's doors an address names."""

    AUTO = "auto"
    GCS = "gcs"
    CLIENT = "ray client"
    DASHBOARD = "dashboard"


@dataclass(frozen=True)
class RayAddress:
    """A parsed ``--ray-address``: ``text`` as given, and the head's host and port."""

    kind: AddressKind
    text: str = AUTO
    host: str = ""
    port: int = 0

    def matches(self, plan: ClusterPlan) -> bool:
        """True when this address is ``plan``'s head (``auto`` matches every cluster)."""
        if self.kind is AddressKind.AUTO:
            return True
        head = plan.head.node
        hosts = {head.name, head.address}
        ports = plan.inventory.ports
        if self.kind is AddressKind.GCS:
            return self.host in hosts and self.port == ports.gcs
        if self.kind is AddressKind.CLIENT:
            return self.host in hosts and self.port == ports.client_server
        dashboard = urlsplit(plan.dashboard_url)
        return self.host in {*hosts, dashboard.hostname} and self.port == ports.dashboard


def parse_ray_address(text: str) -> RayAddress:
    """Read ``auto``, ``HOST:PORT``, ``ray://HOST[:PORT]`` or ``http(s)://HOST[:PORT]``.

    Raises:
        RtkError: Not one of these forms (the message lists them).
    """
    given = text.strip()
    if given.lower() == AUTO:
        return RayAddress(AddressKind.AUTO)
    scheme, _, rest = given.rpartition("://")
    kinds = {
        "": AddressKind.GCS,
        "ray": AddressKind.CLIENT,
        "http": AddressKind.DASHBOARD,
        "https": AddressKind.DASHBOARD,
    }
    kind = kinds.get(scheme.lower())
    problem = None
    if kind is None:
        problem = f"unknown scheme {scheme + '://'!r}"
    else:
        try:
            parts = urlsplit(f"//{rest}")
            host, port = parts.hostname, parts.port
        except ValueError as e:
            problem = str(e)
        else:
            default = {AddressKind.CLIENT: RAY_CLIENT_PORT, AddressKind.DASHBOARD: DASHBOARD_PORT}
            port = port or default.get(kind)
            if not host:
                problem = "no host"
            elif port is None:
                problem = "a GCS address needs its port (the head's ports.gcs, 6379 by default)"
            elif parts.path.strip("/") or parts.query:
                problem = "only HOST:PORT may follow the scheme"
    if problem is not None or kind is None or host is None or port is None:
        raise RtkError(f"--ray-address {text!r}: {problem}; give {FORMS}")
    return RayAddress(kind, given, host, port)


def head_addresses(plan: ClusterPlan) -> str:
    """The addresses ``plan``'s head answers at, for messages."""
    ports = plan.inventory.ports
    head = plan.head.node.address
    return f"{plan.head_address}, ray://{head}:{ports.client_server} or {plan.dashboard_url}"


def check_address(address: RayAddress, plan: ClusterPlan) -> None:
    """Raise unless ``address`` is ``auto`` or ``plan``'s head.

    Raises:
        RtkError: The address names another cluster than the inventory's.
    """
    if not address.matches(plan):
        raise RtkError(
            f"--ray-address {address.text} is not the head of cluster "
            f"{plan.inventory.name!r} ({plan.inventory.source}), which is at "
            f"{head_addresses(plan)}; leave --ray-address out (auto), or give the "
            "inventory of the cluster at that address"
        )


def find_cluster(
    address: RayAddress, ray_address_env: str | None = None, root: Path | None = None
) -> Inventory | None:
    """The cluster ``address`` names when no inventory was given; None for ``auto`` alone.

    Args:
        address: The parsed ``--ray-address``.
        ray_address_env: ``$RAY_ADDRESS``, which ``auto`` stands for when set.
        root: rtk's state directory (default: ``state_root()``).

    Raises:
        RtkError: ``$RAY_ADDRESS`` is not an address, or the address is no cluster
            brought up from this machine (the message lists those that are).
    """
    if address.kind is AddressKind.AUTO:
        if (ray_address_env or "").strip().lower() in UNSET_VALUES:
            local = default_inventory()
            return local if StateStore(local.name, root).load() is not None else None
        try:
            address = parse_ray_address(ray_address_env or "")
        except RtkError as e:
            raise RtkError(f"RAY_ADDRESS (which --ray-address auto reads): {e}") from e
    plans, unreadable = known_clusters(root)
    for plan in plans:
        if address.matches(plan):
            return plan.inventory
    raise RtkError(_not_found(address, plans, unreadable))


def known_clusters(root: Path | None = None) -> tuple[list[ClusterPlan], list[str]]:
    """The clusters brought up from this machine, planned from their inventories.

    Returns:
        The plans, by cluster name; and one line per cluster whose inventory cannot
        be read here (its file moved, or a relative path from another directory).
    """
    base = root or state_root()
    plans: list[ClusterPlan] = []
    unreadable: list[str] = []
    if not base.is_dir():
        return plans, unreadable
    for directory in sorted(p for p in base.iterdir() if p.is_dir()):
        try:
            record = StateStore(directory.name, base).load()
        except StateError as e:
            unreadable.append(f"{directory.name}: {e}")
            continue
        if record is None:
            continue
        source = record.source or ""
        if not source:
            unreadable.append(f"{directory.name}: no inventory recorded")
            continue
        try:
            inventory = default_inventory() if source == EMBEDDED_SOURCE else load_inventory(source)
        except InventoryError as e:
            why = str(e).splitlines()[0]
            unreadable.append(f"{directory.name}: its inventory cannot be read here ({why})")
            continue
        if inventory.name != directory.name:
            unreadable.append(f"{directory.name}: {source} now describes {inventory.name!r}")
            continue
        plans.append(build_plan(inventory))
    return plans, unreadable


def _not_found(address: RayAddress, plans: Sequence[ClusterPlan], unreadable: Sequence[str]) -> str:
    lines = [
        f"--ray-address {address.text}: no cluster brought up from this machine has its "
        f"head there ({address.kind.value} address {address.host}:{address.port})."
    ]
    if plans:
        lines.append("Clusters rtk knows here:")
        lines += [f"  {p.inventory.name}: {head_addresses(p)}" for p in plans[:LISTED_AT_MOST]]
        if len(plans) > LISTED_AT_MOST:
            lines.append(f"  ... and {len(plans) - LISTED_AT_MOST} more")
    lines += [f"  (skipped {line})" for line in unreadable[:LISTED_AT_MOST]]
    lines.append(
        "Give the cluster's inventory (rtk train INVENTORY, or RTK_INVENTORY: "
        'eval "$(rtk env INVENTORY --export)" sets it), or --local. rtk trains only on '
        "clusters it brought up (rtk up); its job's driver runs on the head through the "
        "Jobs API, never over Ray Client. For a Ray cluster of your own, run the script "
        "on its head or submit it there with ray job submit."
    )
    return "\n".join(lines)
