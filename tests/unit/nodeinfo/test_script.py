"""``NodeScript``: the one way rtk calls its node scripts, and how it reads their answers.

The scripts themselves run for real (``LocalTransport``) where that is cheap; the
failure shapes a node can give (no Python, garbage, an error answer, no answer) are
scripted.
"""

from __future__ import annotations

import ast
import re
import shlex

import pytest
from scripted_transport import Reply, ScriptedTransport, answer

from toolkit.errors import ClusterError, GpuControlError
from toolkit.gpu.limits_over_ssh import CONTROL
from toolkit.inventory import Node, default_inventory
from toolkit.lifecycle.ray_logs import LOGPACK
from toolkit.nodeinfo import AGENT, FACTS, NodeScript
from toolkit.nodeinfo.script import assemble, script_source
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


COMMON = """from __future__ import annotations

import json

LIMIT = 3


def run_main(call):
    return 0
"""


def test_assemble_puts_common_first_and_drops_the_scripts_import_of_it() -> None:
    script = (
        '"""A script."""\n\nfrom __future__ import annotations\n\nimport json\n'
        "from toolkit.node.common import (\n    LIMIT,\n    run_main,\n)\n\n"
        "def main(argv):\n    return run_main(lambda: {'limit': LIMIT})\n"
    )
    sent = assemble(script, COMMON)
    assert sent.startswith(COMMON.rstrip() + "\n")
    assert sent.endswith(
        '"""A script."""\n\n\nimport json\n\n'
        "def main(argv):\n    return run_main(lambda: {'limit': LIMIT})\n"
    )
    assert "toolkit" not in sent and sent.count("from __future__") == 1
    compile(sent, "sent", "exec")


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("from toolkit.node.common import LIMIT as CAP", "defines no LIMIT (or it is renamed)"),
        ("from toolkit.node.common import run_mian", "defines no run_mian"),
        ("import toolkit.node.common", "line 2: take toolkit.node.common's names with"),
        ("from toolkit.node import common", "line 2: take"),
        ("from .common import LIMIT", "line 2: take"),
        ("def f():\n    from toolkit.node.common import LIMIT", "line 3: take"),
        ("from toolkit.node.common import LIMIT\nLIMIT = 4", "defines LIMIT, which"),
        ("def run_main(call):\n    return 1", "defines run_main, which"),
    ],
)
def test_assemble_refuses_what_would_not_run_or_would_shadow_common(line: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        assemble(f"import json\n{line}\n", COMMON)


@pytest.mark.parametrize("script", [AGENT, FACTS, CONTROL, LOGPACK])
def test_each_script_is_sent_with_common_in_front_and_no_rtk_import(script: NodeScript) -> None:
    sent = script.source()
    common = script_source("toolkit.node", "common.py")
    own = script_source(script.package, script.file)
    assert "from toolkit.node.common import" in own
    assert sent.startswith(common.rstrip() + "\n")
    tree = ast.parse(sent)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {name for name in imported if name.startswith("toolkit")}
    assert sent.count("from __future__ import annotations") == 1


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


def test_a_fan_out_asking_for_a_scripts_text_at_once_gets_one_text() -> None:
    """Every thread of a fan-out's first sends gets the same text, parsed once.

    ast.parse from many threads at once fails in CPython 3.11 before 3.11.5
    ("AST constructor recursion depth mismatch"), which a node's facts call once
    reported as that node's failure.
    """
    from concurrent.futures import ThreadPoolExecutor

    from toolkit.nodeinfo import script

    script._assembled.cache_clear()
    with ThreadPoolExecutor(32) as threads:
        texts = list(threads.map(lambda _: FACTS.source(), range(256)))
    assert len(set(texts)) == 1 and script._assembled.cache_info().misses == 1
