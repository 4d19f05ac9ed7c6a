"""``rtk sandbox up``'s step lines: a node's own steps are details past a few nodes."""

from __future__ import annotations

import io

from toolkit.cli.cmd_sandbox import sandbox_progress
from toolkit.cli.output.progress import ProgressReporter


def steps(nodes: int, verbose: bool = False) -> list[str]:
    out = io.StringIO()
    with ProgressReporter(nodes, verbose=verbose, stream=out, live=False) as reporter:
        say = sandbox_progress(reporter)
        say("keys and configs in the sandbox directory")
        for i in range(1, nodes + 1):
            say(f"node{i}: init started, host PID {1000 + i}")
            say(f"node{i}: ssh root@10.77.0.{10 + i} works (after 0.3 s)")
        say("node-to-node TCP works")
    return [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]


def test_node_steps_show_on_few_nodes_or_verbose_and_sandbox_steps_always() -> None:
    few = steps(3)
    assert len(few) == 2 + 2 * 3
    assert few[1].split() == ["node1", "init", "started,", "host", "PID", "1001"]
    many = steps(40)
    assert [line.split(maxsplit=1)[1] for line in many] == [
        "keys and configs in the sandbox directory",
        "node-to-node TCP works",
    ]
    assert len(steps(40, verbose=True)) == 2 + 2 * 40
