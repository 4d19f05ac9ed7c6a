"""``rtk exec``'s output: per node on few nodes or --verbose, one block per distinct output."""

from __future__ import annotations

from toolkit.cli.output.node_runs import group_outputs, render_runs_text
from toolkit.cluster.command import NodeRun

GPUS = "GPU 0: NVIDIA H100 80GB HBM3\nGPU 1: NVIDIA H100 80GB HBM3\n"


def runs_of(count: int) -> list[NodeRun]:
    """``nvidia-smi -L`` on ``count`` nodes: one node lacks a GPU, one is unreachable."""
    runs = [NodeRun(f"n{i:04d}", 0, GPUS, "", 0.1 + (i % 3) / 10) for i in range(1, count + 1)]
    runs[6] = NodeRun("n0007", 0, GPUS.splitlines(keepends=True)[0], "", 0.2)
    if count > 9:
        runs[9] = NodeRun("n0010", 9, "", "NVIDIA-SMI has failed\n", 0.3)
    runs[-1] = NodeRun(runs[-1].node, None, error=f"{runs[-1].node}: SSH to 10.1.0.9 timed out")
    return runs


def render(runs: list[NodeRun], verbose: bool = False) -> tuple[list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []
    render_runs_text(runs, lambda line, to_err: (err if to_err else out).append(line), verbose)
    return out, err


def test_group_outputs_keeps_exact_text_and_inventory_order() -> None:
    runs = runs_of(12)
    blocks = group_outputs(runs, "stdout")
    assert [(b.hostlist(), b.text) for b in blocks] == [
        ("n[0001-0006,0008-0009,0011]", GPUS),
        ("n0007", "GPU 0: NVIDIA H100 80GB HBM3\n"),
    ]
    assert [(b.nodes, b.text) for b in group_outputs(runs, "stderr")] == [
        (("n0010",), "NVIDIA-SMI has failed\n")
    ]


def test_many_nodes_print_each_distinct_output_once() -> None:
    out, err = render(runs_of(1024))
    assert out == [
        "--- n[0001-0006,0008-0009,0011-1023] (1021 nodes) ---",
        "GPU 0: NVIDIA H100 80GB HBM3",
        "GPU 1: NVIDIA H100 80GB HBM3",
        "[n0007] GPU 0: NVIDIA H100 80GB HBM3",
    ]
    assert err == [
        "[n0010] NVIDIA-SMI has failed",
        "failed on 1 node(s) n1024 (0.0 s): SSH to <address> timed out",
        "exit 0 on 1022 node(s) n[0001-0009,0011-1023] (0.1-0.3 s)",
        "exit 9 on 1 node(s) n0010 (0.3 s)",
    ]


def test_few_nodes_or_verbose_print_every_node_as_before() -> None:
    out, err = render(runs_of(8))
    assert out[:2] == [
        "[n0001] GPU 0: NVIDIA H100 80GB HBM3",
        "[n0001] GPU 1: NVIDIA H100 80GB HBM3",
    ]
    assert len(out) == 6 * 2 + 1  # n0007 has one line, n0008 none (unreachable)
    assert err == [
        *(f"n{i:04d}  exit 0  ({0.1 + (i % 3) / 10:.1f} s)" for i in range(1, 8)),
        "n0008  failed: n0008: SSH to 10.1.0.9 timed out  (0.0 s)",
    ]
    out, err = render(runs_of(1024), verbose=True)
    assert len(out) == 1021 * 2 + 1
    assert len(err) == 1 + 1024
    assert err[-1] == "n1024  failed: n1024: SSH to 10.1.0.9 timed out  (0.0 s)"
