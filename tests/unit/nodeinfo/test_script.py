"""``NodeScript``: the one way rtk calls its node scripts, and how it reads their answers.

The scripts themselves run for real (``LocalTransport``) where that is cheap; the
failure shapes a node can give (no Python, garbage, an error answer, no answer) are
scripted.
"""

from __future__ import annotations

import shlex

import pytest
from scripted_transport import Reply, ScriptedTransport, answer

from toolkit.errors import ClusterError, GpuControlError
from toolkit.gpu.settings import CONTROL
from toolkit.inventory import Node, default_inventory
from toolkit.nodeinfo import AGENT, FACTS
from toolkit.transport import LocalTransport


@pytest.fixture
def node() -> Node:
    return default_inventory().head


def test_the_command_line_quotes_every_argument(node: Node) -> None:
    line = AGENT.command(node, "probe", "10.0.0.1", "/tmp/a b", "1,2", "")
    assert shlex.split(line) == [node.python, "-", "probe", "10.0.0.1", "/tmp/a b", "1,2", ""]
    with_env = AGENT.command(node, "status", "-", "h:1", env_file="/t/rtk/node.env")
    assert (
        with_env
        == f"set -a && . /t/rtk/node.env && set +a && {shlex.join([node.python, '-', 'status', '-', 'h:1'])}"
    )


def test_the_sources_are_the_files_sent(node: Node) -> None:
    assert AGENT.source().startswith('"""rtk\'s node agent')
    assert "def host_facts" in FACTS.source()
    assert CONTROL.source() != AGENT.source()


def test_a_real_script_answers_through_the_local_transport(node: Node) -> None:
    # The agent's usage error is a JSON answer with "error": a failure naming the node.
    with pytest.raises(ClusterError, match=rf"^{node.name}: usage: agent probe\|stop"):
        AGENT.call(LocalTransport(), node, AGENT.command(node, "nonsense"), 30)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (answer({"error": "cannot resolve head"}, exit_code=3), "cannot resolve head"),
        (
            Reply(exit_code=127, stderr="bash: python3: command not found"),
            r".*python not found on the node; set python or venv",
        ),
        (Reply(exit_code=1, stdout="Traceback\nSyntaxError: bad\n"), "Traceback\nSyntaxError: bad"),
        (Reply(exit_code=0, stdout="not json\n"), "not json"),
        (Reply(exit_code=0, stdout="[1, 2]\n"), r"\[1, 2\]"),
        (Reply(exit_code=0), "exit status 0"),
        (Reply(exit_code=1, stdout='{"ok": true}\n'), r'\{"ok": true\}'),
    ],
)
def test_every_failure_names_the_node(node: Node, reply: Reply, reason: str) -> None:
    transport = ScriptedTransport().on("*", "", reply)
    with pytest.raises(ClusterError, match=rf"^{node.name}: {reason}"):
        AGENT.call(transport, node, AGENT.command(node, "probe"), 30)
    sent = transport.calls[0]
    assert sent.stdin == AGENT.source() and sent.timeout_s == 30


def test_the_answer_is_the_last_line(node: Node) -> None:
    transport = ScriptedTransport().on("*", "", Reply(stdout='log line\n{"route": {}}\n'))
    assert AGENT.call(transport, node, "x", 5) == {"route": {}}


def test_control_needs_ok_and_raises_its_own_error(node: Node) -> None:
    transport = ScriptedTransport()
    transport.on("*", "apply", answer({"ok": False, "error": "no permission"}, exit_code=1))
    transport.on("*", "restore", answer({"ok": False, "result": {}}))
    transport.on("*", "query", answer({"ok": True, "result": {"GPU-1": {"power_limit_w": 300}}}))
    with pytest.raises(GpuControlError, match=f"^{node.name}: no permission$"):
        CONTROL.call(transport, node, "apply", 5)
    with pytest.raises(GpuControlError, match=f"^{node.name}: "):
        CONTROL.call(transport, node, "restore", 5)
    assert CONTROL.call(transport, node, "query", 5)["result"] == {"GPU-1": {"power_limit_w": 300}}
