"""The inventory: which nodes form the cluster and how to reach and start them."""

from __future__ import annotations

from toolkit.inventory.hostrange import HostRangeError, expand_hosts
from toolkit.inventory.loader import (
    EMBEDDED_DEFAULT,
    default_inventory,
    load_inventory,
    parse_inventory,
)
from toolkit.inventory.models import InventorySpec
from toolkit.inventory.resolved import Container, Inventory, Node, SshTarget

__all__ = [
    "EMBEDDED_DEFAULT",
    "Container",
    "HostRangeError",
    "Inventory",
    "InventorySpec",
    "Node",
    "SshTarget",
    "default_inventory",
    "expand_hosts",
    "load_inventory",
    "parse_inventory",
]
