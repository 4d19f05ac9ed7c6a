"""inputs/spans.py: ranks' spans from several rank files joined onto one set of names."""

from __future__ import annotations

import numpy as np

from toolkit.telemetry.report.inputs.spans import SpanPart, join_spans


def part(
    rank: int, node: list[int], device: list[int], names: list[str], gpus: list[str | None]
) -> SpanPart:
    n = len(node)
    return SpanPart(
        step=np.arange(n, dtype=np.int64),
        rank=rank,
        node=np.array(node, dtype=np.int64),
        device=np.array(device, dtype=np.int64),
        enter_s=np.arange(n, dtype=np.float64),
        exit_s=np.arange(n, dtype=np.float64) + 0.5,
        names=names,
        gpus=gpus,
    )


def test_each_files_codes_map_onto_the_sorted_names_in_use() -> None:
    first = part(0, [1, 1], [0, 2], ["unused", "node2"], ["GPU-b", "GPU-x", None])
    second = part(5, [0], [1], ["node1"], ["GPU-z", "GPU-a"])
    waits = join_spans([first, second], [False, True])
    assert waits.nodes == ["node1", "node2"] and waits.devices == ["GPU-a", "GPU-b"]
    assert waits.node.tolist() == [1, 1, 0]
    assert waits.device.tolist() == [1, -1, 0]
    assert waits.rank.tolist() == [0, 0, 5]
    assert waits.wait_s.tolist() == [0.5, 0.5, 0.5]
    assert waits.backward is not None and waits.backward.tolist() == [False, False, True]
    assert waits.sources == ["barriers", "backward"]


def test_barrier_waits_alone_carry_no_backward_flags() -> None:
    waits = join_spans([part(0, [0], [0], ["n"], [None])], [False])
    assert waits.backward is None and waits.sources == ["barriers"]
    empty = join_spans([])
    assert len(empty) == 0 and empty.sources == [] and empty.nodes == []
