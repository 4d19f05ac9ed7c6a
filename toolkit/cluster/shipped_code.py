"""Whether a Ray job carries rtk's source to the nodes, or the nodes run their own copy.

A job ships this machine's ``toolkit/`` as ``py_modules`` unless every node's Python
already imports the very same source (its digest, ``toolkit.node.facts.source_digest``,
read by preflight). Shipping costs each node a download and an unpack before the
job's first process, and every Ray Train worker waits for it: seconds on a fresh
cluster, which is every SLURM allocation.

``rtk up``'s checks keep what they found in the cluster's state (``STATE_KEY``), so
the commands after it (``rtk train --no-preflight`` in a batch job) know it too.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import toolkit
from toolkit.cluster.state import StateStore
from toolkit.node.facts import source_digest
from toolkit.node.host_facts import SoftwareFacts

# The state's record of the rtk source every node imported when last checked.
STATE_KEY = "nodes_rtk_digest"


def package_dir() -> str:
    """This toolkit's source directory, shipped with jobs so nodes run the same code."""
    return str(Path(toolkit.__file__).parent)


@functools.cache
def local_digest() -> str:
    """The digest of the rtk source this process runs."""
    return source_digest(package_dir())


def code_env(ship: bool) -> dict[str, Any]:
    """The runtime environment's part that brings rtk to the nodes (empty: not shipped)."""
    return {"py_modules": [package_dir()]} if ship else {}


def nodes_differ(software: Mapping[str, SoftwareFacts]) -> list[str]:
    """The nodes whose Python does not import this very rtk source (none: ship nothing)."""
    here = local_digest()
    return sorted(name for name, s in software.items() if s.rtk_digest != here)


def remember(store: StateStore, same_code: bool) -> None:
    """Keep in the cluster's state whether every node imports this rtk's source."""
    record = store.load()
    if record is None:
        return  # no cluster brought up from here: nothing to remember it with
    record.pop(STATE_KEY, None)
    if same_code:
        record[STATE_KEY] = local_digest()
    store.save(record)


def known_same(state: Mapping[str, Any] | None) -> bool:
    """Whether the state says every node imports the very source this process runs."""
    return state is not None and state.get(STATE_KEY) == local_digest()
